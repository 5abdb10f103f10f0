"""DefaultRequestProcessor: the NameServer's request handlers, one method per request code.

Every handler answers: a bad header, a body that does not decode or a failed CRC check yields
an error response whose remark names what was wrong, and leaves the tables untouched (all
decoding and validation happens before the first table write).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import zlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import ValidationError

from remoting import RequestCode, RequestContext, RequestDispatcher, ResponseCode, split_addr
from remoting.body import DataVersion, KVTable, RegisterBrokerBody, decode_register_broker_body
from remoting.command import RemotingCommand
from remoting.headers import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    HeaderError,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from remoting.properties import ConfigError

from .kv_config_manager import NAMESPACE_ORDER_TOPIC_CONFIG

if TYPE_CHECKING:
    from .controller import NamesrvController

log = structlog.get_logger(__name__)

# FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL), which Java appends to the TOPIC_NOT_EXIST remark.
APPLY_TOPIC_SUGGESTION = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

# Register bodies above this size are decoded in a worker thread, not on the event loop.
LARGE_BODY_BYTES = 256 * 1024

KV_GROUP = "namesrv-kv"

Handler = Callable[[RequestContext, RemotingCommand], "RemotingCommand | Awaitable[RemotingCommand]"]


class BadRequest(ValueError):
    """The request is malformed; the message is the response remark."""


def _describe(e: Exception) -> str:
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "body"
        return f"{loc}: {err['msg']}"
    return str(e)


def _bad_request(cmd: RemotingCommand, e: Exception) -> RemotingCommand:
    return cmd.response(ResponseCode.SYSTEM_ERROR, remark=_describe(e))


def _guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn HeaderError / BadRequest raised by a handler into a SYSTEM_ERROR answer with its reason
    (Java answers a RemotingCommandException the same way)."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(
            self: DefaultRequestProcessor, ctx: RequestContext, cmd: RemotingCommand
        ) -> RemotingCommand:
            try:
                return await fn(self, ctx, cmd)
            except (HeaderError, BadRequest) as e:
                self._warn_bad(ctx, cmd, e)
                return _bad_request(cmd, e)

        return run_async

    @functools.wraps(fn)
    def run(self: DefaultRequestProcessor, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        try:
            return fn(self, ctx, cmd)
        except (HeaderError, BadRequest) as e:
            self._warn_bad(ctx, cmd, e)
            return _bad_request(cmd, e)

    return run


def _body_crc32_matches(body: bytes, expected: int) -> bool:
    crc = zlib.crc32(body)
    # Java's UtilAll.crc32 masks the sign bit; accept the unmasked forms too.
    return expected in (crc & 0x7FFFFFFF, crc, crc - (1 << 32))


def _require(value: str, what: str) -> str:
    if not value.strip():
        raise BadRequest(f"header field '{what}' is empty")
    return value


def _decode_register(cmd: RemotingCommand, compressed: bool) -> RegisterBrokerBody:
    try:
        return decode_register_broker_body(cmd.body, compressed)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"bad REGISTER_BROKER body: {_describe(e)}") from None


class DefaultRequestProcessor:
    def __init__(self, controller: NamesrvController) -> None:
        self.controller = controller
        self.route_info_manager = controller.route_info_manager
        self.kv_config_manager = controller.kv_config_manager

    def register(self, dispatcher: RequestDispatcher) -> None:
        """Register every handler. Writes that persist to disk get their own bounded group so a
        slow disk cannot hold up route queries."""
        dispatcher.add_group(KV_GROUP, concurrency=4, max_pending=1000)
        table: dict[int, Handler] = {
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.QUERY_DATA_VERSION: self.query_broker_topic_config,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm_of_broker,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm_of_broker,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list_from_nameserver,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topic_list_from_ns,
            RequestCode.GET_UNIT_TOPIC_LIST: self.get_unit_topic_list,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self.get_has_unit_sub_topic_list,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.get_has_unit_sub_ununit_topic_list,
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
        }
        for code, handler in table.items():
            dispatcher.register(code, handler)
        dispatcher.register(RequestCode.PUT_KV_CONFIG, self.put_kv_config, group=KV_GROUP)
        dispatcher.register(RequestCode.DELETE_KV_CONFIG, self.delete_kv_config, group=KV_GROUP)
        dispatcher.register(RequestCode.UPDATE_NAMESRV_CONFIG, self.update_config, group=KV_GROUP)

    def _warn_bad(self, ctx: RequestContext, cmd: RemotingCommand, e: Exception) -> None:
        log.warning("bad_request", code=cmd.code, peer=ctx.remote_addr, reason=_describe(e))

    # ------------------------------------------------------------------ KV config

    @_guarded
    async def put_kv_config(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = PutKVConfigRequestHeader.decode(cmd.ext_fields)
        _require(h.namespace, "namespace")
        _require(h.key, "key")
        self.kv_config_manager.put_kv_config(h.namespace, h.key, h.value)
        return await self._persist_kv(cmd)

    @_guarded
    async def delete_kv_config(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteKVConfigRequestHeader.decode(cmd.ext_fields)
        if not self.kv_config_manager.delete_kv_config(h.namespace, h.key):
            return cmd.response(ResponseCode.SUCCESS)
        return await self._persist_kv(cmd)

    async def _persist_kv(self, cmd: RemotingCommand) -> RemotingCommand:
        try:
            await self.kv_config_manager.persist()
        except OSError as e:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"kv config changed in memory but persisting to {self.kv_config_manager.kv_config_path} failed: {e}",
            )
        return cmd.response(ResponseCode.SUCCESS)

    @_guarded
    def get_kv_config(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = GetKVConfigRequestHeader.decode(cmd.ext_fields)
        value = self.kv_config_manager.get_kv_config(h.namespace, h.key)
        if value is None:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND, remark=f"No config item, Namespace: {h.namespace} Key: {h.key}"
            )
        return cmd.response(ResponseCode.SUCCESS, ext_fields=GetKVConfigResponseHeader(value=value).encode())

    @_guarded
    def get_kv_list_by_namespace(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = GetKVListByNamespaceRequestHeader.decode(cmd.ext_fields)
        table = self.kv_config_manager.get_kv_list_by_namespace(h.namespace)
        if table is None:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND, remark=f"No config item, Namespace: {h.namespace}"
            )
        return cmd.response(ResponseCode.SUCCESS, body=KVTable(table=table).encode())

    # ------------------------------------------------------------------ broker registration

    @_guarded
    async def register_broker(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.decode(cmd.ext_fields)
        _require(h.cluster_name, "clusterName")
        _require(h.broker_name, "brokerName")
        try:
            split_addr(_require(h.broker_addr, "brokerAddr"))
        except ValueError:
            raise BadRequest(f"header field 'brokerAddr' is not ip:port: {h.broker_addr!r}") from None
        if h.broker_id < 0:
            raise BadRequest(f"header field 'brokerId' must be >= 0, got {h.broker_id}")
        body = cmd.body_bytes()
        if h.body_crc32 != 0 and not _body_crc32_matches(body, h.body_crc32):
            log.warning("register_broker_crc32_mismatch", peer=ctx.remote_addr, broker_addr=h.broker_addr)
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                remark=(
                    f"crc32 not match: header bodyCrc32={h.body_crc32}, body crc32="
                    f"{zlib.crc32(body) & 0x7FFFFFFF}; registration of {h.broker_addr} rejected"
                ),
            )
        if len(body) > LARGE_BODY_BYTES:
            reg_body = await asyncio.to_thread(_decode_register, cmd, h.compressed)
        else:
            reg_body = _decode_register(cmd, h.compressed)
        # From here on no await: the tables change in one step.
        result = self.route_info_manager.register_broker(
            h.cluster_name,
            h.broker_addr,
            h.broker_name,
            h.broker_id,
            h.ha_server_addr,
            reg_body.topic_config_serialize_wrapper,
            reg_body.filter_server_list,
            ctx.conn,
        )
        order_conf = self.kv_config_manager.get_kv_list_by_namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return cmd.response(
            ResponseCode.SUCCESS,
            ext_fields=RegisterBrokerResponseHeader(
                ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
            ).encode(),
            body=KVTable(table=order_conf).encode() if order_conf is not None else None,
        )

    @_guarded
    def unregister_broker(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.decode(cmd.ext_fields)
        self.route_info_manager.unregister_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id)
        return cmd.response(ResponseCode.SUCCESS)

    @_guarded
    def query_broker_topic_config(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryDataVersionRequestHeader.decode(cmd.ext_fields)
        try:
            data_version = DataVersion.decode(cmd.body)
        except ValueError as e:
            raise BadRequest(
                f"bad QUERY_DATA_VERSION body (DataVersion JSON expected): {_describe(e)}"
            ) from None
        rim = self.route_info_manager
        changed = rim.is_broker_topic_config_changed(h.broker_addr, data_version)
        if not changed:
            rim.update_broker_info_update_timestamp(h.broker_addr)
        ns_version = rim.query_broker_topic_config(h.broker_addr)
        return cmd.response(
            ResponseCode.SUCCESS,
            ext_fields=QueryDataVersionResponseHeader(changed=changed).encode(),
            body=ns_version.encode() if ns_version is not None else None,
        )

    # ------------------------------------------------------------------ routes

    @_guarded
    def get_route_info_by_topic(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.decode(cmd.ext_fields)
        route = self.route_info_manager.pickup_topic_route_data(h.topic)
        if route is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {h.topic}{APPLY_TOPIC_SUGGESTION}",
            )
        if self.controller.config.orderMessageEnable:
            route.order_topic_conf = self.kv_config_manager.get_kv_config(
                NAMESPACE_ORDER_TOPIC_CONFIG, h.topic
            )
        # Like fastjson, leave out null fields (orderTopicConf) rather than writing null.
        return cmd.response(
            ResponseCode.SUCCESS, body=route.model_dump_json(by_alias=True, exclude_none=True).encode()
        )

    def get_broker_cluster_info(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(
            ResponseCode.SUCCESS, body=self.route_info_manager.get_all_cluster_info().encode()
        )

    @_guarded
    def wipe_write_perm_of_broker(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = WipeWritePermOfBrokerRequestHeader.decode(cmd.ext_fields)
        count = self.route_info_manager.wipe_write_perm_of_broker(h.broker_name)
        log.info("wipe_write_perm_of_broker", broker_name=h.broker_name, peer=ctx.remote_addr, topics=count)
        return cmd.response(
            ResponseCode.SUCCESS,
            ext_fields=WipeWritePermOfBrokerResponseHeader(wipe_topic_count=count).encode(),
        )

    @_guarded
    def add_write_perm_of_broker(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = AddWritePermOfBrokerRequestHeader.decode(cmd.ext_fields)
        count = self.route_info_manager.add_write_perm_of_broker(h.broker_name)
        log.info("add_write_perm_of_broker", broker_name=h.broker_name, peer=ctx.remote_addr, topics=count)
        return cmd.response(
            ResponseCode.SUCCESS,
            ext_fields=AddWritePermOfBrokerResponseHeader(add_topic_count=count).encode(),
        )

    def get_all_topic_list_from_nameserver(
        self, ctx: RequestContext, cmd: RemotingCommand
    ) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=self.route_info_manager.get_all_topic_list().encode())

    @_guarded
    def delete_topic_in_namesrv(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicFromNamesrvRequestHeader.decode(cmd.ext_fields)
        self.route_info_manager.delete_topic(h.topic, h.cluster_name or None)
        return cmd.response(ResponseCode.SUCCESS)

    @_guarded
    def get_topics_by_cluster(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        h = GetTopicsByClusterRequestHeader.decode(cmd.ext_fields)
        return cmd.response(
            ResponseCode.SUCCESS, body=self.route_info_manager.get_topics_by_cluster(h.cluster).encode()
        )

    def get_system_topic_list_from_ns(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(
            ResponseCode.SUCCESS, body=self.route_info_manager.get_system_topic_list().encode()
        )

    def get_unit_topic_list(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=self.route_info_manager.get_unit_topics().encode())

    def get_has_unit_sub_topic_list(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(
            ResponseCode.SUCCESS, body=self.route_info_manager.get_has_unit_sub_topic_list().encode()
        )

    def get_has_unit_sub_ununit_topic_list(
        self, ctx: RequestContext, cmd: RemotingCommand
    ) -> RemotingCommand:
        return cmd.response(
            ResponseCode.SUCCESS, body=self.route_info_manager.get_has_unit_sub_ununit_topic_list().encode()
        )

    # ------------------------------------------------------------------ NameServer config

    def get_config(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=self.controller.config_text().encode())

    @_guarded
    async def update_config(self, ctx: RequestContext, cmd: RemotingCommand) -> RemotingCommand:
        log.info("update_config_called", peer=ctx.remote_addr)
        try:
            text = cmd.body_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadRequest(f"UPDATE_NAMESRV_CONFIG body is not UTF-8 properties text: {e}") from None
        if not text.strip():
            return cmd.response(ResponseCode.SUCCESS)  # nothing to change, as in Java
        try:
            await self.controller.update_config(text)
        except ConfigError as e:
            raise BadRequest(str(e)) from None
        except OSError as e:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"config updated in memory but persisting to {self.controller.config.configStorePath} failed: {e}",
            )
        return cmd.response(ResponseCode.SUCCESS)
