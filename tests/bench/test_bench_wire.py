"""bench/bench_wire.py times the broker's send and pull paths for our clients' MSGPACK headers and Java's
JSON and ROCKETMQ ones through a real connection, round by round, and reports the medians and their ratios;
the Java requests it builds are taken by the broker's fast paths (a SendFixed / PullFixed each)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from remoting.codec import FrameDecoder, PullFixed, SendFixed
from remoting.codes import SerializeType
from tests.support.bench_scripts import load_bench_script

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_wire.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_both_wires_are_timed_round_by_round() -> None:
    r = _run("--rounds", "2", "--per", "320", "--pulls", "40", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    for what in ("send", "pull"):
        for wire in ("msgpack", "json", "rocketmq", "cpp"):
            rounds = out["rounds"][what][wire]
            assert len(rounds) == 2 and all(0 < us < 100_000 for us in rounds)
            assert out["median_us"][what][wire] == pytest.approx(sum(rounds) / 2)
        med = out["median_us"][what]
        assert out["json_over_msgpack"][what] == round(med["json"] / med["msgpack"], 3)
        assert out["rocketmq_over_msgpack"][what] == round(med["rocketmq"] / med["msgpack"], 3)
        assert out["cpp_over_msgpack"][what] == round(med["cpp"] / med["msgpack"], 3)


@pytest.mark.parametrize(("wire", "stype"), [("json", SerializeType.JSON), ("rocketmq", SerializeType.ROCKETMQ)])
def test_the_java_requests_take_the_fast_paths(monkeypatch: pytest.MonkeyPatch, wire: str, stype: SerializeType) -> None:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # its sibling scripts, as when it runs
    bw = load_bench_script("bench_wire")
    (read,) = bw.send_reads(wire, 4, 0, 4)
    sends = FrameDecoder().feed(read)
    assert [c.serialize_type for c in sends] == [stype] * 4
    assert all(isinstance(c.send_fixed, SendFixed) and c.language.name == "JAVA" for c in sends)
    pulls = [c for read in bw.pull_reads(wire, [0, 32, 64, 96], 7) for c in FrameDecoder().feed(read)]
    assert [c.serialize_type for c in pulls] == [stype] * 4
    assert [c.code for c in pulls] == [11] * 4 and all(isinstance(c.send_fixed, PullFixed) for c in pulls)
    assert [c.ext_fields["queueOffset"] for c in pulls] == ["0", "32", "64", "96"]
    ours = [c for read in bw.pull_reads("msgpack", [0, 0, 0, 0], 7) for c in FrameDecoder().feed(read)]
    assert [c.serialize_type for c in ours] == [SerializeType.MSGPACK] * 4


def test_the_cpp_requests_are_as_the_cpp_core_writes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Numbers as numbers, the ACL entries with a Signature of its own per request, language CPP: read by the
    generic decoder (a SendFixed / PullFixed by their values), never by a remembered shape."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    bw = load_bench_script("bench_wire")
    (read,) = bw.send_reads("cpp", 4, 0, 4)
    sends = FrameDecoder().feed(read)
    assert all(c.serialize_type is SerializeType.JSON and c.language.name == "CPP" for c in sends)
    assert all(isinstance(c.send_fixed, SendFixed) and c.ext_fields["d"] == 4 for c in sends)
    assert len({c.ext_fields["Signature"] for c in sends}) == 4
    pulls = [c for read in bw.pull_reads("cpp", [0, 32, 64, 96], 7) for c in FrameDecoder().feed(read)]
    assert [c.ext_fields["queueOffset"] for c in pulls] == [0, 32, 64, 96]
    assert all(isinstance(c.send_fixed, PullFixed) and c.ext_fields["sysFlag"] == 6 for c in pulls)


def test_bad_arguments_are_refused() -> None:
    r = _run("--pulls", "2")
    assert r.returncode != 0 and "--pulls >= 4" in r.stderr
