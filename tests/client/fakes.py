"""In-process fake NameServer and broker on remoting.RemotingServer, for client error paths.

They speak the real protocol (the client cannot tell), but their behaviour is scripted: a broker
that answers SYSTEM_BUSY N times, one that never answers, one that fails a code, ...
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from remoting import (
    RemotingCommand,
    RemotingServer,
    RequestCode,
    RequestContext,
    RequestDispatcher,
    ResponseCode,
)
from remoting.body import BrokerData, ClusterInfo, QueueData, TopicRouteData
from remoting.headers import decode_send_header_v2
from remoting.message import create_offset_msg_id


class FakeNameServer:
    """Answers GET_ROUTEINFO_BY_TOPIC from `routes` and GET_BROKER_CLUSTER_INFO; counts requests."""

    def __init__(self) -> None:
        self.routes: dict[str, TopicRouteData] = {}
        self.requests: list[RemotingCommand] = []
        self.cluster = ClusterInfo()
        d = RequestDispatcher()
        d.register_default(self._handle)
        self.server = RemotingServer(d, host="127.0.0.1", port=0, name="fake-namesrv")
        self.addr = ""

    async def start(self) -> str:
        host, port = await self.server.start()
        self.addr = f"{host}:{port}"
        return self.addr

    async def stop(self) -> None:
        await self.server.stop()

    def add_route(self, topic: str, brokers: dict[str, str], queues: int = 4, perm: int = 6) -> None:
        """brokers: broker name -> master address."""
        self.routes[topic] = TopicRouteData(
            queue_datas=[
                QueueData(broker_name=n, read_queue_nums=queues, write_queue_nums=queues, perm=perm)
                for n in brokers
            ],
            broker_datas=[
                BrokerData(cluster="FakeCluster", broker_name=n, broker_addrs={0: a})
                for n, a in brokers.items()
            ],
        )
        for n, a in brokers.items():
            self.cluster.broker_addr_table[n] = BrokerData(
                cluster="FakeCluster", broker_name=n, broker_addrs={0: a}
            )
            names = self.cluster.cluster_addr_table.setdefault("FakeCluster", [])
            if n not in names:
                names.append(n)

    def _handle(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        self.requests.append(cmd)
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            topic = (cmd.ext_fields or {}).get("topic", "")
            route = self.routes.get(str(topic))
            if route is None:
                return cmd.response(
                    ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}"
                )
            return cmd.response(body=route.encode())
        if cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            return cmd.response(body=self.cluster.encode())
        return cmd.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"fake namesrv: {cmd.code} not supported"
        )


@dataclass
class FakeBroker:
    """A broker whose answer to sends is scripted by `behaviour(cmd) -> 'ok' | 'hang' | (code, remark)`."""

    name: str = "fake-broker"
    behaviour: Callable[[RemotingCommand], object] = field(default=lambda cmd: "ok")
    sends: list[RemotingCommand] = field(default_factory=list)
    others: list[RemotingCommand] = field(default_factory=list)
    addr: str = ""

    def __post_init__(self) -> None:
        d = RequestDispatcher()
        d.register_default(self._handle)
        self.server = RemotingServer(d, host="127.0.0.1", port=0, name=self.name)
        self._offsets = itertools.count()
        self.held: list[tuple[RequestContext, RemotingCommand]] = []

    async def start(self) -> str:
        host, port = await self.server.start()
        self.addr = f"{host}:{port}"
        return self.addr

    async def stop(self) -> None:
        await self.server.stop()

    def _handle(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code in (
            RequestCode.SEND_MESSAGE_V2,
            RequestCode.SEND_MESSAGE,
            RequestCode.SEND_BATCH_MESSAGE,
        ):
            self.sends.append(cmd)
            what = self.behaviour(cmd)
            if what == "hang":
                self.held.append((ctx, cmd))
                return None
            if isinstance(what, tuple):
                code, remark = what
                return cmd.response(code, remark)
            h = decode_send_header_v2(cmd.ext_fields)
            off = next(self._offsets)
            host, port = self.addr.split(":")
            return cmd.response(
                ext_fields={
                    "msgId": create_offset_msg_id(host, int(port), off * 100),
                    "queueId": str(h.queue_id),
                    "queueOffset": str(off),
                }
            )
        self.others.append(cmd)
        return cmd.response()


async def wait_until(pred: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def one_broker_cluster(topic: str) -> AsyncIterator[tuple[FakeNameServer, FakeBroker]]:
    """A fake NameServer routing `topic` to one fake broker "broker-a"; both stopped on exit."""
    ns = FakeNameServer()
    await ns.start()
    b = FakeBroker(name="broker-a")
    await b.start()
    ns.add_route(topic, {"broker-a": b.addr})
    try:
        yield ns, b
    finally:
        await b.stop()
        await ns.stop()
