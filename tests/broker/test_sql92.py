"""SQL92 selectors: what RocketMQ's SelectorParser selects, on string properties as a broker sees them.

Cases marked "upstream" are from RocketMQ's own filter tests (ExpressionTest, ParserTest), with the
properties as the strings a message carries."""

from __future__ import annotations

import pytest

from broker.filter.sql92 import SelectorEvalError, SelectorParseError, compile_selector

T, F, U = True, False, None  # U: unknown (NULL): not selected


@pytest.mark.parametrize(
    ("expression", "props", "expected"),
    [
        # upstream: numbers in properties compared with literals
        ("a > 3.1E10", {"a": "3.1415E10"}, T),
        ("a > 3.14", {"a": "3.1415"}, T),
        ("a > b", {"a": "10", "b": "20"}, F),
        ("a > b", {"a": "20", "b": "10"}, T),
        ("a=b", {"a": "3.14", "b": "3.14"}, T),
        ("a<>b", {"a": "3.14", "b": "3.14"}, F),
        ("a<>b", {"a": "3.14", "b": "3.141"}, T),
        ("a=3 and b<>4 And c>5 AND d<=4", {"a": "3", "b": "5", "c": "6", "d": "4"}, T),
        ("a=3 and b<>4 And c>5 AND d<=4", {"a": "3", "b": "4", "c": "6", "d": "4"}, F),
        ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "5", "d": "5"}, F),
        ("a in ('3', '4', '5')", {"a": "4"}, T),
        ("a not in ('3', '4', '5')", {"a": "4"}, F),
        ("a not in ('3', '4', '5')", {}, U),
        ("a between 2 and 10", {"a": "10"}, T),
        ("a between 2 and 10", {"a": "11"}, F),
        ("a not between 2 and 10", {"a": "1"}, T),
        ("a is null", {}, T),
        ("a is not null", {"a": ""}, T),
        ("a is not null and a='hello'", {"a": "hello"}, T),
        ("a is not null and a='hello'", {}, F),
        ("a is null OR a='hello'", {}, T),
        ("a is null OR a='hello'", {"a": "abc"}, F),
        ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, T),
        ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, F),
        ("a=TRUE", {"a": "TRUE"}, T),  # Boolean.valueOf ignores case
        ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, T),
        ("a not in ('4', '4', '5') and b between 3 and 10 and c not contains 'axbc'",
         {"a": "3", "b": "3", "c": "axbcd"}, F),
        ("value contains 'x'", {"value": "axb"}, T),
        ("value startswith 'ax'", {"value": "axb"}, T),
        ("value endswith 'xb'", {"value": "axb"}, T),
        ("value not contains 'x'", {"value": "axb"}, F),
        ("value not endswith 'x'", {"value": "axb"}, T),
        ("value contains ''", {"value": "axb"}, F),  # an empty search is FALSE, negated or not
        ("value not contains ''", {"value": "axb"}, F),
        ("value contains 'x'", {}, F),  # NULL is FALSE here, not unknown
        ("value not contains 'x'", {}, F),
        ("'axb' not startswith 'u'", {}, T),
        ("' ' contains ' '", {}, T),
        # three-valued logic
        ("a = 1", {}, U),
        ("a = 1 OR b = 1", {"b": "1"}, T),
        ("a = 1 AND b = 1", {"b": "2"}, F),
        ("a = 1 AND b = 1", {"b": "1"}, U),
        ("NOT (a = 1)", {}, U),
        ("NOT (a = 1)", {"a": "2"}, T),
        ("a <> 1", {}, U),
        ("a", {"a": "true"}, F),  # a bare property is TRUE only for a Boolean, which strings never are
        ("TRUE", {}, T),
        ("NULL IS NULL", {}, T),
        # types: an int literal reads the property as a Java int, a long one as a long, a decimal as a double
        ("a = 10", {"a": "10"}, T),
        ("a = '10'", {"a": "10"}, T),
        ("a = '10'", {"a": "010"}, F),
        ("a = 10", {"a": "010"}, T),
        ("a = 10", {"a": "+10"}, T),
        ("a > 2147483647", {"a": "2147483648"}, U),  # NumberFormatException: not selected
        ("a > 2147483647L", {"a": "2147483648"}, U),  # an L suffix within int's range still makes an int
        ("a > 2147483648", {"a": "2147483649"}, T),  # past int's range the literal is a long
        ("a >= 1.5", {"a": "1.5"}, T),
        ("a > 1.0", {"a": " 2 "}, T),  # Double.valueOf trims
        ("a > 1", {"a": " 2 "}, U),  # Integer.valueOf does not
        ("a > 1", {"a": "1.5"}, U),
        ("a > 1.0", {"a": "2d"}, T),
        ("a > -5", {"a": "-4"}, T),
        ("-a < 0", {"a": "5"}, U),  # negating a string property: NULL
        ("a > b", {"a": "x", "b": "1"}, U),  # two strings by > compare as doubles or not at all
        ("a = b", {"a": "x", "b": "x"}, T),
        ("a = TRUE", {"a": "yes"}, F),
        ("TRUE = a", {"a": "true"}, U),  # upstream casts the Boolean to String: error, not selected
        ("1 < a", {"a": "2"}, T),
        ("a = 1.0", {"a": "1"}, T),
        ("a in ('x') or b = 1", {"b": "1"}, T),
        ("a IN ('x', 'y', 'z', 'w', 'v', 'u')", {"a": "v"}, T),
        # keywords in any case, comments
        ("A between 1 AnD 3 /* c */ oR b Is NoT nUlL", {"A": "2"}, T),
        ("a = 1 -- to the end", {"a": "1"}, T),
        ("a = 1 -- line\n AND b = 2", {"a": "1", "b": "2"}, T),
        ("$x_1 = 'y'", {"$x_1": "y"}, T),
    ],
)
def test_selects_as_rocketmq_does(expression: str, props: dict[str, str], expected: bool | None) -> None:
    sel = compile_selector(expression)
    assert sel.matches(props) is (expected is True)
    if expected is not None:
        assert sel.evaluate(props) is expected


@pytest.mark.parametrize(
    ("expression", "props"),
    [
        ("a between up and low", {"a": "3.14", "up": "up", "low": "low"}),
        ("key is not null and key between 0 and 100", {"key": "con"}),
        ("a between 0 and 100", {"a": "abc"}),
        ("a > 5", {"a": "5.5"}),
        ("TRUE = a", {"a": "true"}),
    ],
)
def test_values_that_do_not_read_as_the_type_compared_fail_the_message(expression: str, props: dict[str, str]) -> None:
    sel = compile_selector(expression)
    with pytest.raises(SelectorEvalError):
        sel.evaluate(props)
    assert sel.matches(props) is False


def test_an_error_fails_the_whole_expression_even_under_or() -> None:
    # upstream's exception leaves the evaluation: the message is not selected, though b = 1 holds
    sel = compile_selector("a > 5 OR b = 1")
    assert sel.matches({"a": "x", "b": "1"}) is False
    assert sel.matches({"b": "1"}) is True  # (NULL, not an error, when a is missing)


def test_none_properties_are_all_null() -> None:
    assert compile_selector("a IS NULL").matches(None)
    assert not compile_selector("a = 1").matches(None)


@pytest.mark.parametrize(
    ("expression", "complaint"),
    [
        ("a and between 2 and 10", "column 7"),  # upstream's invalidExpression
        (" a between 10 and 0", "BETWEEN"),  # upstream's illegalBetween
        ("a > 100000000000000000000000", "range"),
        ("a > 1" + "1" * 400 + ".0", "largest double"),
        ("value contains x", "string literal"),
        ("value contains 123", "string literal"),
        ("'axb' contains ", "string literal"),
        ("a = NULL", "IS [NOT] NULL"),
        ("NULL = a", "IS [NOT] NULL"),
        ("TRUE = 1", "cannot be compared"),
        ("a > 'x'", "cannot be compared"),
        ("a > TRUE", "cannot be compared"),
        ("NOT a > 5", "cannot be compared"),  # NOT binds to `a`: write NOT (a > 5)
        ("(a > 1) > 2", "cannot be compared"),
        ("5 IN ('a')", "property before IN"),
        ("a IN (1, 2)", "string literal"),
        ("a IN ()", "string literal"),
        ("5", "boolean"),
        ("'x'", "boolean"),
        ("-a", "boolean"),
        ("a = 1 b = 2", "after a complete expression"),  # upstream drops `b = 2` silently
        ("a = 1)", "after a complete expression"),
        ("(a = 1", "expected )"),
        ("a >", "end of the expression"),
        ("a ! 1", "unexpected character '!'"),
        ("a == 1", "'='"),
        ("a = 'x", "unterminated string"),
        ("a.b = 1", "unexpected character '.'"),
        ("", "end of the expression"),
        ("a = 1 /* open", "unexpected character '/'"),
        ("(" * 400 + "a = 1" + ")" * 400, "nested too deeply"),
    ],
)
def test_parse_errors_say_what_and_where(expression: str, complaint: str) -> None:
    with pytest.raises(SelectorParseError) as e:
        compile_selector(expression)
    assert complaint in str(e.value)


def test_zero_decimal_literal_is_accepted() -> None:
    # upstream rejects decimals below Double.MIN_VALUE, 0.0 included: a deliberate difference
    assert compile_selector("a > 0.0").matches({"a": "0.5"})


def test_long_chains_evaluate_without_deep_recursion() -> None:
    n = 5000
    sel = compile_selector(" OR ".join(f"a = '{i}'" for i in range(n)))
    assert sel.matches({"a": str(n - 1)}) and not sel.matches({"a": "x"})
    sel = compile_selector(" AND ".join(f"b{i} IS NULL" for i in range(n)))
    assert sel.matches({}) and not sel.matches({f"b{n - 1}": "1"})


def test_in_and_system_properties() -> None:
    sel = compile_selector("TAGS IN ('TagA', 'TagB') AND KEYS STARTSWITH 'order-' AND price >= 100")
    assert sel.matches({"TAGS": "TagB", "KEYS": "order-7", "price": "100"})
    assert not sel.matches({"TAGS": "TagC", "KEYS": "order-7", "price": "100"})
    assert not sel.matches({"TAGS": "TagA", "KEYS": "order-7", "price": "99"})
