"""BrokerOuterAPI: the broker's calls to the NameServers (register, unregister)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from broker.config import split_namesrv_addr
from remoting.body import (
    KVTable,
    RegisterBrokerBody,
    TopicConfigSerializeWrapper,
    encode_register_broker_body,
)
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import (
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from remoting.message import body_crc

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class RegisterBrokerResult:
    namesrv_addr: str
    ha_server_addr: str | None = None
    master_addr: str | None = None
    kv_table: KVTable | None = None


class BrokerOuterAPI:
    def __init__(self, namesrv_addr: str | None = None) -> None:
        self.client = RemotingClient()
        self.namesrv_addr_list: list[str] = split_namesrv_addr(namesrv_addr)
        self._registered_once: set[str] = set()

    def update_name_server_address_list(self, addrs: str | None) -> None:
        self.namesrv_addr_list = split_namesrv_addr(addrs)

    async def shutdown(self) -> None:
        await self.client.close()

    async def register_broker_all(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_wrapper: TopicConfigSerializeWrapper,
        filter_server_list: list[str] | None = None,
        *,
        oneway: bool = False,
        timeout_ms: int = 6000,
        compressed: bool = False,
    ) -> list[RegisterBrokerResult]:
        """Register with every NameServer in parallel; returns the successful results."""
        if not self.namesrv_addr_list:
            return []
        body = encode_register_broker_body(
            RegisterBrokerBody(
                topic_config_serialize_wrapper=topic_config_wrapper, filter_server_list=filter_server_list or []
            ),
            compressed,
        )
        header = RegisterBrokerRequestHeader(
            broker_name=broker_name,
            broker_addr=broker_addr,
            cluster_name=cluster_name,
            ha_server_addr=ha_server_addr,
            broker_id=broker_id,
            compressed=compressed,
            body_crc32=body_crc(body),
        ).encode()
        results = await asyncio.gather(
            *(self._register(addr, header, body, oneway, timeout_ms) for addr in self.namesrv_addr_list)
        )
        return [r for r in results if r is not None]

    async def _register(
        self, addr: str, header: dict[str, str], body: bytes, oneway: bool, timeout_ms: int
    ) -> RegisterBrokerResult | None:
        req = RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(header), body)
        try:
            if oneway:
                await asyncio.wait_for(self.client.invoke_oneway(addr, req), timeout_ms / 1000.0)
                return None
            resp = await self.client.invoke(addr, req, timeout_ms)
        except (RemotingError, TimeoutError) as e:
            log.warning("register_broker_failed", namesrv=addr, error=str(e) or type(e).__name__)
            self._registered_once.discard(addr)
            return None
        if resp.code != ResponseCode.SUCCESS:
            log.warning("register_broker_refused", namesrv=addr, code=resp.code, remark=resp.remark)
            self._registered_once.discard(addr)
            return None
        if addr not in self._registered_once:
            self._registered_once.add(addr)
            log.info("registered_with_namesrv", namesrv=addr)
        else:
            log.debug("registered_with_namesrv", namesrv=addr)
        rh = RegisterBrokerResponseHeader.decode(resp.ext_fields)
        kv = None
        if resp.body:
            try:
                kv = KVTable.decode(resp.body)
            except ValueError:
                kv = None
        return RegisterBrokerResult(addr, rh.ha_server_addr or None, rh.master_addr or None, kv)

    async def unregister_broker_all(
        self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int, timeout_ms: int = 3000
    ) -> int:
        """Unregister from every NameServer in parallel; returns how many acknowledged."""
        header = UnRegisterBrokerRequestHeader(
            broker_name=broker_name, broker_addr=broker_addr, cluster_name=cluster_name, broker_id=broker_id
        ).encode()

        async def one(addr: str) -> bool:
            req = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, dict(header))
            try:
                resp = await self.client.invoke(addr, req, timeout_ms)
            except RemotingError as e:
                log.warning("unregister_broker_failed", namesrv=addr, error=str(e))
                return False
            if resp.code != ResponseCode.SUCCESS:
                log.warning("unregister_broker_refused", namesrv=addr, code=resp.code, remark=resp.remark)
                return False
            log.info("unregistered_from_namesrv", namesrv=addr)
            return True

        if not self.namesrv_addr_list:
            return 0
        done = await asyncio.gather(*(one(a) for a in self.namesrv_addr_list))
        return sum(done)
