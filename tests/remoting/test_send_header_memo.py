"""decode_send_header_v2 looks the per-producer constant fields up in a memo: every header it returns
equals the straight decoder's, and odd headers (long names, missing or non-string fields) still
decode, or fail, exactly as before."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from remoting import headers
from remoting.headers import HeaderError, _decode_send_header_v2, decode_send_header_v2

BASE = {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000123", "h": "0",
        "i": "WAIT\x01true\x02UNIQ_KEY\x01AB", "j": "0", "k": "false", "m": "false"}


def _variants() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [dict(BASE), dict(BASE, g="1700000000999", i="KEYS\x01k")]
    out.append(dict(BASE, l="16"))
    out.append(dict(BASE, maxReconsumeTimes="5"))  # l absent, its long name present
    out.append(dict(BASE, l="16", maxReconsumeTimes="5"))
    out.append(dict(BASE, e="7", f="4", h="9", j="2", k="true", m="true"))
    out.append(dict(BASE, k="1", m="0"))
    bad_g = dict(BASE, g="nope")
    out.append(bad_g)
    no_i = {k: v for k, v in BASE.items() if k != "i"}
    out.append(no_i)
    out.append(dict(no_i, properties="TAGS\x01x"))
    no_g = {k: v for k, v in BASE.items() if k != "g"}
    out.append(dict(no_g, bornTimestamp="42"))
    out.append({headers.SEND_V2_SHORT_NAMES[k]: v for k, v in BASE.items()})  # long names only
    no_c = {k: v for k, v in BASE.items() if k != "c"}
    out.append(dict(no_c, defaultTopic="OTHER"))
    out.append(dict(BASE, e=3, d=4))  # non-string values (a msgpack peer)
    out.append(dict(BASE, k=True))
    out.append(dict(BASE, e="x"))  # bad constant field
    out.append({k: v for k, v in BASE.items() if k != "b"})  # required topic missing
    return out


def _outcome(fn: Any, ext: dict[str, Any]) -> Any:
    try:
        return fn(ext)
    except HeaderError as e:
        return ("error", str(e))


@pytest.mark.parametrize("order", range(3))
def test_memo_decodes_exactly_as_the_straight_decoder(order: int) -> None:
    headers._send_v2_memo.clear()
    variants = _variants()
    seq = list(itertools.chain.from_iterable([variants] * 3))
    if order == 1:
        seq.reverse()
    elif order == 2:
        seq = [v for pair in zip(seq, reversed(seq), strict=True) for v in pair]
    for ext in seq:
        assert _outcome(decode_send_header_v2, ext) == _outcome(_decode_send_header_v2, ext), ext
    assert headers._send_v2_memo  # the common headers were memoised


def test_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(headers, "_SEND_V2_MEMO_MAX", 8)
    headers._send_v2_memo.clear()
    for q in range(20):
        h = decode_send_header_v2(dict(BASE, e=str(q)))
        assert h.queue_id == q
    assert len(headers._send_v2_memo) <= 8


def test_empty_header_still_names_the_missing_field() -> None:
    for ext in (None, {}):
        with pytest.raises(HeaderError):
            decode_send_header_v2(ext)
