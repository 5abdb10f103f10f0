"""JSON as Java RocketMQ peers write it.

fastjson writes map keys that are not strings without quotes (`{0:"addr"}`) and, for maps keyed
by objects (ConsumeStats.offsetTable keyed by MessageQueue), writes the object itself as the key.
Standard JSON is tried first (fast path); a small lenient parser handles the rest, turning
non-string keys into their JSON text so models can parse them back.
"""

from __future__ import annotations

import json
from typing import Any

_WS = " \t\r\n"


class _Lenient:
    __slots__ = ("s", "i")

    def __init__(self, s: str) -> None:
        self.s = s
        self.i = 0

    def error(self, what: str) -> ValueError:
        return ValueError(f"bad JSON at char {self.i}: {what}")

    def ws(self) -> None:
        s, i = self.s, self.i
        while i < len(s) and s[i] in _WS:
            i += 1
        self.i = i

    def value(self) -> Any:
        self.ws()
        if self.i >= len(self.s):
            raise self.error("unexpected end")
        c = self.s[self.i]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c == '"':
            return self.string()
        return self.scalar()

    def string(self) -> str:
        dec = json.JSONDecoder()
        v, end = dec.raw_decode(self.s, self.i)
        self.i = end
        return v

    def scalar(self) -> Any:
        s, i = self.s, self.i
        j = i
        while j < len(s) and s[j] not in ",:}] \t\r\n":
            j += 1
        tok = s[i:j]
        self.i = j
        if tok == "true":
            return True
        if tok == "false":
            return False
        if tok == "null":
            return None
        try:
            return int(tok)
        except ValueError:
            try:
                return float(tok)
            except ValueError:
                raise self.error(f"bad token {tok!r}") from None

    def arr(self) -> list[Any]:
        self.i += 1
        out: list[Any] = []
        self.ws()
        if self.s[self.i] == "]":
            self.i += 1
            return out
        while True:
            out.append(self.value())
            self.ws()
            c = self.s[self.i]
            self.i += 1
            if c == "]":
                return out
            if c != ",":
                raise self.error("expected , or ]")

    def obj(self) -> dict[str, Any]:
        self.i += 1
        out: dict[str, Any] = {}
        self.ws()
        if self.s[self.i] == "}":
            self.i += 1
            return out
        while True:
            self.ws()
            k = self.value()
            key = k if isinstance(k, str) else json.dumps(k, separators=(",", ":"), sort_keys=True)
            self.ws()
            if self.s[self.i] != ":":
                raise self.error("expected :")
            self.i += 1
            out[key] = self.value()
            self.ws()
            c = self.s[self.i]
            self.i += 1
            if c == "}":
                return out
            if c != ",":
                raise self.error("expected , or }")


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        p = _Lenient(text)
        v = p.value()
        p.ws()
        if p.i != len(text):
            raise p.error("trailing data")
        return v
    except IndexError:
        raise ValueError("bad JSON: unexpected end") from None


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
