"""The real RocketMQ C++ client core (rocketmq-python-cvs) against our daemons: send, push-consume
with a tag filter, committed offsets. Needs build/venv-cpp (`make test` creates it)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import QueryConsumerOffsetRequestHeader
from remoting.message import decode_messages
from tests.broker.helpers import pull
from tests.support.daemons import ROOT, start_broker

CPP_PY = ROOT / "build" / "venv-cpp" / "bin" / "python"
HERE = Path(__file__).parent / "cpp"

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(not CPP_PY.exists(), reason="the RocketMQ C++ client venv (build/venv-cpp) is missing"),
]


def run_cpp(script: str, *args: str, home: Path, timeout: float = 60, linger: float = 0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(home), LINGER_S=str(linger))
    return subprocess.run([str(CPP_PY), str(HERE / script), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


async def test_cpp_producer_and_push_consumer(tmp_path: Path, namesrv: str) -> None:
    br_d, br = start_broker(tmp_path, namesrv)
    home = tmp_path / "home"
    home.mkdir()
    try:
        sent = await asyncio.to_thread(run_cpp, "producer.py", namesrv, "CppTopic", "6", home=home)
        lines = [x.split() for x in sent.stdout.splitlines() if x.startswith("SENT")]
        assert len(lines) == 6, sent.stdout + sent.stderr
        assert all(parts[1] == "0" for parts in lines)  # SEND_OK

        c = RemotingClient()
        try:
            bodies: list[tuple[bytes, str | None, str | None, str]] = []
            for _ in range(100):  # the consume queues are built just after the sends are acknowledged
                bodies = []
                for q in range(4):
                    p = await c.invoke(br, pull("CppTopic", q, 0, sys_flag=0x4))
                    if p.code == ResponseCode.SUCCESS:
                        bodies += [(m.body, m.tags, m.keys, m.properties["idx"]) for m in decode_messages(p.body)]
                if len(bodies) == 6:
                    break
                await asyncio.sleep(0.05)
            assert sorted(bodies) == sorted(
                (f"cpp-{i}".encode(), "TagA" if i % 2 == 0 else "TagB", f"key{i}", str(i)) for i in range(6)
            )

            got = await asyncio.to_thread(run_cpp, "consumer.py", namesrv, "CppTopic", "3", "TagA", "CID-cpp",
                                          home=home, linger=6)
            received = sorted(x.split()[1] for x in got.stdout.splitlines() if x.startswith("GOT"))
            assert received == ["cpp-0", "cpp-2", "cpp-4"], got.stdout + got.stderr
            committed = 0
            for q in range(4):
                h = QueryConsumerOffsetRequestHeader(consumer_group="CID-cpp", topic="CppTopic", queue_id=q)
                r = await c.invoke(br, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, h.encode()))
                assert r.code == ResponseCode.SUCCESS
                committed += int(r.ext_fields["offset"])
            assert committed >= 3  # the consumer committed past what it consumed (incl. filtered B messages)
        finally:
            await c.close()
    finally:
        assert br_d.terminate() == 0
