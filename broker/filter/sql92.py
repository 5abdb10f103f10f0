"""SQL92 message selectors (RocketMQ's `MessageSelector.bySql`): compiled once, evaluated per message.

The grammar and the evaluation rules are RocketMQ 4.x's (its `filter` module's SelectorParser, which
came from ActiveMQ's JMS selectors), so an expression selects here what it selects there:

- operators `=`, `<>`, `>`, `>=`, `<`, `<=`, `[NOT] BETWEEN a AND b`, `[NOT] IN ('a', 'b')`,
  `IS [NOT] NULL`, `[NOT] CONTAINS | STARTSWITH | ENDSWITH 'text'`, `AND`, `OR`, `NOT`, unary `+`/`-`,
  parentheses; literals: strings in single quotes (`''` for a quote), integers (an optional `L`
  suffix), decimals with an optional exponent, TRUE, FALSE, NULL; keywords in any case;
- identifiers (`[A-Za-z_$][A-Za-z0-9_$]*`) name message properties, user and system ones alike
  (TAGS, KEYS, ...); a property a message lacks is NULL, and SQL's three-valued logic applies;
- properties are strings. Compared with a number, a property is read as one (`a > 5` reads `a` as a
  Java int, `a > 5.0` as a double); compared with a string property, `>`/`<` read both as doubles.
  A value that does not read as the number wanted makes the whole expression fail for that message,
  which is then not delivered (upstream's NumberFormatException), as does comparing TRUE with a string.

Two deliberate differences, where upstream accepts or rejects by accident:
- input left over after a complete expression is an error: upstream stops at the first token that
  cannot continue the expression and drops the rest, so `a = 1 b = 2` selected by `a = 1` alone
  (a `--` comment may end the input without a newline, which upstream's leniency also allowed);
- a decimal literal of zero (`0.0`) is accepted: upstream rejects any below Double.MIN_VALUE.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Selector", "SelectorParseError", "compile_selector"]

Props = Mapping[str, str] | None
Fn = Callable[[Props], Any]


class SelectorParseError(ValueError):
    """An expression that does not compile; the message says what and where."""


class SelectorEvalError(ValueError):
    """A message whose properties the expression cannot be evaluated on (it is not selected)."""


class _Long(int):
    """A Java long constant (an integer literal past int's range; an L suffix alone does not make one,
    as upstream): a property compared with it is read with long's range, not int's."""

    __slots__ = ()


_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_JAVA_INTEGER = re.compile(r"[+-]?\d+")  # Integer.valueOf / Long.valueOf: any Unicode digits, no spaces
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)[fFdD]?", re.ASCII
)


def _java_int(s: str) -> int:
    if s.isdigit() and s.isascii():  # (the usual case, without the regex)
        v = int(s)
        if v <= _INT_MAX:
            return v
    elif _JAVA_INTEGER.fullmatch(s):
        v = int(s)
        if _INT_MIN <= v <= _INT_MAX:
            return v
    raise SelectorEvalError(f"For input string: {s!r} (not an int)")


def _java_long(s: str) -> _Long:
    if _JAVA_INTEGER.fullmatch(s):
        v = int(s)
        if _LONG_MIN <= v <= _LONG_MAX:
            return _Long(v)
    raise SelectorEvalError(f"For input string: {s!r} (not a long)")


def _java_double(s: str) -> float:
    t = s.strip("".join(map(chr, range(33))))  # String.trim: every char <= ' '
    if _JAVA_DOUBLE.fullmatch(t):
        if t[-1] in "fFdD" and not t.endswith(("NaN", "Infinity")):
            t = t[:-1]
        return float(t.replace("Infinity", "inf"))
    raise SelectorEvalError(f"For input string: {s!r} (not a double)")


def _double_compare(a: float, b: float) -> int:
    """Double.compare: NaN above everything and equal to itself, -0.0 below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    a_nan, b_nan = a != a, b != b
    if a_nan or b_nan:
        return a_nan - b_nan
    return (math.copysign(1.0, a) > 0) - (math.copysign(1.0, b) > 0)


def _compare(lv: Any, rv: Any) -> int:
    """ComparisonExpression.__compare with string conversion on: values of different types are
    brought to one where Java would, else the answer is -1 (so `<` holds and `=` does not)."""
    lc, rc = type(lv), type(rv)
    if lc is not rc:
        if lc is bool:
            if rc is str:  # upstream casts the Boolean itself to String: ClassCastException
                raise SelectorEvalError("a boolean can't be compared with a string")
            return -1
        if lc is int or lc is _Long:
            if rc is float:
                lv = float(lv)
            elif rc is str:
                rv = _java_int(rv) if lc is int else _java_long(rv)
            elif rc is not int and rc is not _Long:
                return -1
        elif lc is float:
            if rc is int or rc is _Long:
                rv = float(rv)
            elif rc is str:
                rv = _java_double(rv)
            else:
                return -1
        elif lc is str:
            if rc is bool:
                lv = lv.lower() == "true"  # Boolean.valueOf
            elif rc is int:
                lv = _java_int(lv)
            elif rc is _Long:
                lv = _java_long(lv)
            elif rc is float:
                lv = _java_double(lv)
            else:
                return -1
        else:
            return -1
    if type(lv) is float:
        return _double_compare(lv, rv)
    return (lv > rv) - (lv < rv)


# ---------------------------------------------------------------------------------------------- nodes
# What the parser's checks look at (upstream tests the expression classes): a CONST is a literal
# number or string; TRUE, FALSE and NULL are BOOL_CONST (constant *and* boolean); PROP a property;
# BOOL any expression with a boolean result; VALUE the rest (a negation).
CONST, BOOL_CONST, PROP, BOOL, VALUE = range(5)


class _Node:
    __slots__ = ("kind", "fn", "value", "text", "chain")

    def __init__(self, kind: int, fn: Fn, text: str, value: Any = None) -> None:
        self.kind = kind
        self.fn = fn
        self.text = text
        self.value = value  # a constant's value
        self.chain: tuple[str, list[_Node]] | None = None  # an AND/OR chain's operator and operands

    @property
    def is_constant(self) -> bool:
        return self.kind == CONST or self.kind == BOOL_CONST

    @property
    def is_boolean(self) -> bool:
        return self.kind == BOOL or self.kind == BOOL_CONST


def _is_number(v: Any) -> bool:
    t = type(v)
    return t is int or t is _Long or t is float


def _constant(value: Any, kind: int = CONST) -> _Node:
    if value is None:
        text = "NULL"
    elif type(value) is bool:
        text = "TRUE" if value else "FALSE"
    elif type(value) is str:
        text = "'" + value.replace("'", "''") + "'"
    else:
        text = repr(value) if type(value) is float else str(int(value))
    return _Node(kind, lambda _p, v=value: v, text, value)


def _property(name: str) -> _Node:
    def fn(p: Props, name: str = name) -> Any:
        return None if p is None else p.get(name)

    return _Node(PROP, fn, name)


def _as_boolean(n: _Node) -> _Node:
    if n.is_boolean:
        return n
    if n.kind == PROP:  # a bare property: TRUE only if it held a Boolean, which a string never is
        f = n.fn

        def cast(p: Props) -> bool | None:
            v = f(p)
            if v is None:
                return None
            return v if type(v) is bool else False

        return _Node(BOOL, cast, n.text)
    raise SelectorParseError(f"expression will not result in a boolean value: {n.text}")


def _not(n: _Node) -> _Node:
    f = n.fn

    def fn(p: Props) -> bool | None:
        v = f(p)
        return None if v is None else not v

    return _Node(BOOL, fn, f"(NOT {n.text})")


def _operands(n: _Node, op: str) -> list[_Node]:
    """The operands of an `op` chain node, else [n]."""
    c = n.chain
    return list(c[1]) if c is not None and c[0] == op else [n]


def _chain(op: str, a: _Node, b: _Node) -> _Node:
    """Three-valued AND (op "AND": stops at the first FALSE) or OR ("OR": at the first TRUE), left to
    right. A chain of one operator is one node, so evaluating `x AND y AND ...` does not recurse once
    per operand."""
    stop = op == "OR"  # the value that decides the chain
    operands = _operands(a, op) + [b]
    fns = tuple(n.fn for n in operands)

    def fn(p: Props) -> bool | None:
        unknown = False
        for f in fns:
            v = f(p)
            if v is stop:
                return stop
            if v is None:
                unknown = True
        return None if unknown else not stop

    node = _Node(BOOL, fn, f"({op} " + ", ".join(n.text for n in operands) + ")")
    node.chain = (op, operands)
    return node


def _and(a: _Node, b: _Node) -> _Node:
    return _chain("AND", a, b)


def _or(a: _Node, b: _Node) -> _Node:
    return _chain("OR", a, b)


def _negate(n: _Node) -> _Node:
    f = n.fn

    def fn(p: Props) -> Any:
        v = f(p)
        t = type(v)
        if t is int:
            return v if v == _INT_MIN else -v  # Java int negation wraps
        if t is _Long:
            return _Long(v if v == _LONG_MIN else -v)
        if t is float:
            return -v
        return None

    return _Node(VALUE, fn, f"(- {n.text})")


def _check_less_than_operand(n: _Node) -> None:
    if n.is_constant:
        if not _is_number(n.value):
            raise SelectorParseError(f"value {n.text} cannot be compared with <, <=, > or >=")
    elif n.is_boolean:
        raise SelectorParseError(f"value {n.text} cannot be compared with <, <=, > or >=")


_ORDER_TESTS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def _ordering(op: str, a: _Node, b: _Node) -> _Node:
    _check_less_than_operand(a)
    _check_less_than_operand(b)
    fa, fb, test = a.fn, b.fn, _ORDER_TESTS[op]

    def fn(p: Props) -> bool | None:
        lv = fa(p)
        if lv is None:
            return None
        rv = fb(p)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:  # two properties: compared as doubles, or not at all
            try:
                lv, rv = _java_double(lv), _java_double(rv)
            except SelectorEvalError:
                raise SelectorEvalError(
                    f"it's illegal to compare strings by '{op}': lv={lv!r}, rv={rv!r}"
                ) from None
        return test(_compare(lv, rv))

    return _Node(BOOL, fn, f"({a.text} {op} {b.text})")


def _equal_fn(fa: Fn, fb: Fn) -> Fn:
    def fn(p: Props) -> bool | None:
        lv = fa(p)
        rv = fb(p)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        if type(lv) is type(rv) and lv == rv:
            return True
        return _compare(lv, rv) == 0

    return fn


def _equal(a: _Node, b: _Node) -> _Node:
    for n in (a, b):
        if n.is_constant and n.value is None:
            raise SelectorParseError(f"{n.text} cannot be compared with = or <>: use IS [NOT] NULL")
    if a.is_constant and b.is_constant and a.is_boolean and not b.is_boolean:
        raise SelectorParseError(f"{a.text} cannot be compared with {b.text}")
    return _Node(BOOL, _equal_fn(a.fn, b.fn), f"({a.text} = {b.text})")


def _is_null(a: _Node) -> _Node:
    f = a.fn
    return _Node(BOOL, lambda p: f(p) is None, f"({a.text} IS NULL)")


def _between(value: _Node, low: _Node, high: _Node) -> _Node:
    if low.is_constant and high.is_constant:
        if low.value is None or high.value is None:
            raise SelectorParseError("illegal values of BETWEEN: values can not be NULL")
        try:
            order = _compare(high.value, low.value)
        except SelectorEvalError as e:
            raise SelectorParseError(f"illegal values of BETWEEN: {e}") from None
        if order < 0:
            raise SelectorParseError(
                f"illegal values of BETWEEN: the low value {low.text} must be less than or equal to "
                f"the high value {high.text}"
            )
    return _and(_ordering(">=", value, low), _ordering("<=", value, high))


def _string_test(kind: str, negated: bool, a: _Node, search: str) -> _Node:
    f = a.fn
    test: Callable[[str, str], bool] = {
        "CONTAINS": lambda v, s: s in v,
        "STARTSWITH": str.startswith,
        "ENDSWITH": str.endswith,
    }[kind]

    def fn(p: Props) -> bool:
        if not search:
            return False
        v = f(p)
        if type(v) is not str:  # NULL and non-strings are FALSE here, not unknown, negated or not
            return False
        return test(v, search) is not negated

    return _Node(BOOL, fn, f"({a.text} {'NOT ' if negated else ''}{kind} '{search}')")


def _in(a: _Node, values: list[str], negated: bool) -> _Node:
    if a.kind != PROP:
        raise SelectorParseError(f"expected a property before IN, got: {a.text}")
    f = a.fn
    members = frozenset(values)

    def fn(p: Props) -> bool | None:
        v = f(p)
        if type(v) is not str:
            return None
        return (v in members) is not negated

    shown = ", ".join("'" + v.replace("'", "''") + "'" for v in values)
    return _Node(BOOL, fn, f"({a.text} {'NOT ' if negated else ''}IN ({shown}))")


# ---------------------------------------------------------------------------------------------- lexer
_KEYWORDS = frozenset(
    ("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH", "ENDSWITH")
)
_SKIP = re.compile(r"(?:[ \t\n\r\f]+|--[^\n\r]*(?:\r\n|\n|\r|\Z)|/\*[^*]*\*+(?:[^/*][^*]*\*+)*/)+")
# In upstream's order, which breaks ties between matches of one length (a keyword beats an identifier).
_TOKENS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("DECIMAL", re.compile(r"0|[1-9][0-9]*[lL]?")),
    ("FLOAT", re.compile(r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")),
    ("STRING", re.compile(r"'(?:''|[^'])*'")),
    ("ID", re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")),
    ("OP", re.compile(r"<>|<=|>=|[=<>(),+-]")),
)


def _tokenize(sql: str) -> list[tuple[str, str, int]]:
    """(kind, text, position) for every token, then ("EOF", "", len)."""
    out: list[tuple[str, str, int]] = []
    pos, n = 0, len(sql)
    while True:
        m = _SKIP.match(sql, pos)
        if m:
            pos = m.end()
        if pos >= n:
            out.append(("EOF", "", n))
            return out
        best_kind, best_end = "", pos
        for kind, pattern in _TOKENS:
            m = pattern.match(sql, pos)
            if m and m.end() > best_end:
                best_kind, best_end = kind, m.end()
        if not best_kind:
            if sql[pos] == "'":
                raise SelectorParseError(f"unterminated string literal at column {pos + 1}")
            raise SelectorParseError(f"unexpected character {sql[pos]!r} at column {pos + 1}")
        text = sql[pos:best_end]
        if best_kind == "ID" and text.upper() in _KEYWORDS:
            best_kind, text = text.upper(), text.upper()
        out.append((best_kind, text, pos))
        pos = best_end


# ---------------------------------------------------------------------------------------------- parser
class _Parser:
    """Recursive descent over upstream's grammar (SelectorParser.jj), one method per production."""

    def __init__(self, sql: str) -> None:
        self.tokens = _tokenize(sql)
        self.i = 0

    def peek(self, k: int = 0) -> tuple[str, str, int]:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def at(self, *kinds_or_ops: str, k: int = 0) -> bool:
        kind, text, _ = self.peek(k)
        return kind in kinds_or_ops or (kind == "OP" and text in kinds_or_ops)

    def take(self) -> tuple[str, str, int]:
        t = self.tokens[self.i]
        self.i += 1
        return t

    def expect(self, what: str) -> tuple[str, str, int]:
        if not self.at(what):
            raise self.error(f"expected {what}")
        return self.take()

    def error(self, what: str) -> SelectorParseError:
        kind, text, pos = self.peek()
        found = "the end of the expression" if kind == "EOF" else repr(text)
        return SelectorParseError(f"{what} at column {pos + 1}, found {found}")

    def selector(self) -> _Node:
        n = _as_boolean(self.or_expression())
        if not self.at("EOF"):
            raise self.error("unexpected input after a complete expression")
        return n

    def or_expression(self) -> _Node:
        left = self.and_expression()
        while self.at("OR"):
            self.take()
            left = _or(_as_boolean(left), _as_boolean(self.and_expression()))
        return left

    def and_expression(self) -> _Node:
        left = self.equality_expression()
        while self.at("AND"):
            self.take()
            left = _and(_as_boolean(left), _as_boolean(self.equality_expression()))
        return left

    def equality_expression(self) -> _Node:
        left = self.comparison_expression()
        while True:
            if self.at("="):
                self.take()
                left = _equal(left, self.comparison_expression())
            elif self.at("<>"):
                self.take()
                left = _not(_equal(left, self.comparison_expression()))
            elif self.at("IS") and self.at("NULL", k=1):
                self.i += 2
                left = _is_null(left)
            elif self.at("IS"):
                self.take()
                self.expect("NOT")
                self.expect("NULL")
                left = _not(_is_null(left))
            else:
                return left

    def comparison_expression(self) -> _Node:
        left = self.unary_expr()
        while True:
            kind, text, _ = self.peek()
            if kind == "OP" and text in _ORDER_TESTS:
                self.take()
                left = _ordering(text, left, self.unary_expr())
                continue
            negated = kind == "NOT" and self.at("CONTAINS", "STARTSWITH", "ENDSWITH", "BETWEEN", "IN", k=1)
            if negated:
                self.take()
                kind = self.peek()[0]
            elif kind not in ("CONTAINS", "STARTSWITH", "ENDSWITH", "BETWEEN", "IN"):
                return left
            self.take()
            if kind == "BETWEEN":
                low = self.unary_expr()
                self.expect("AND")
                high = self.unary_expr()
                if negated:
                    left = _or(_ordering("<", left, low), _ordering(">", left, high))
                else:
                    left = _between(left, low, high)
            elif kind == "IN":
                self.expect("(")
                values = [self.string_literal()]
                while self.at(","):
                    self.take()
                    values.append(self.string_literal())
                self.expect(")")
                left = _in(left, values, negated)
            else:
                left = _string_test(kind, negated, left, self.string_literal())

    def unary_expr(self) -> _Node:
        if self.at("+"):
            self.take()
            return self.unary_expr()
        if self.at("-"):
            self.take()
            return _negate(self.unary_expr())
        if self.at("NOT"):
            self.take()
            return _not(_as_boolean(self.unary_expr()))
        return self.primary_expr()

    def primary_expr(self) -> _Node:
        kind, text, _ = self.peek()
        if kind == "ID":
            self.take()
            return _property(text)
        if kind == "OP" and text == "(":
            self.take()
            n = self.or_expression()
            self.expect(")")
            return n
        return self.literal()

    def literal(self) -> _Node:
        kind, text, _ = self.peek()
        if kind == "STRING":
            return _constant(self.string_literal())
        if kind == "DECIMAL":
            self.take()
            v = int(text.rstrip("lL"))
            if v > _LONG_MAX:
                raise SelectorParseError(f"integer literal {text} is out of long's range")
            return _constant(v if v <= _INT_MAX else _Long(v))
        if kind == "FLOAT":
            self.take()
            f = float(text)
            if math.isinf(f):
                raise SelectorParseError(f"decimal literal {text} is greater than the largest double")
            return _constant(f)
        if kind in ("TRUE", "FALSE", "NULL"):
            self.take()
            return _constant({"TRUE": True, "FALSE": False, "NULL": None}[kind], BOOL_CONST)
        raise self.error("expected a property, a literal or '('")

    def string_literal(self) -> str:
        kind, text, _ = self.peek()
        if kind != "STRING":
            raise self.error("expected a string literal")
        self.take()
        return text[1:-1].replace("''", "'")


# ---------------------------------------------------------------------------------------------- API
class Selector:
    """A compiled expression. `matches(properties)` is what a pull asks of each message: True only
    when the expression is TRUE (unknown, FALSE and evaluation errors select nothing)."""

    __slots__ = ("expression", "_fn")

    def __init__(self, expression: str, fn: Fn) -> None:
        self.expression = expression
        self._fn = fn

    def evaluate(self, properties: Props) -> bool | None:
        """TRUE, FALSE or None (unknown); SelectorEvalError when a property does not read as the type
        it is compared with."""
        return self._fn(properties)

    def matches(self, properties: Props) -> bool:
        try:
            return self._fn(properties) is True
        except (ValueError, TypeError):  # SelectorEvalError, or a case the rules above missed: not selected
            return False

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"


def compile_selector(expression: str) -> Selector:
    """Compile an SQL92 selector; SelectorParseError says what is wrong and where. Callers cache what
    they compile (a pull names its expression every time)."""
    try:
        return Selector(expression, _Parser(expression).selector().fn)
    except RecursionError:
        raise SelectorParseError("expression nested too deeply") from None
