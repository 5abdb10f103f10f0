"""One exception hierarchy for the client.

- `MQClientError`: the client itself refuses or cannot proceed (bad arguments, no route for a
  topic, no NameServer reachable, producer not started).
- `MQBrokerError(code, remark, addr)`: a server (broker or NameServer) answered with an error
  code. Every notable ResponseCode has its own subclass with the number in `code`, and
  `error_for_code(code, remark, addr)` builds the right one (aiokafka-style lookup).
- Transport failures are remoting's own classes, re-exported: `RemotingError` and its subclasses
  `RemotingConnectError`, `RemotingTimeout` (= remoting.errors.RemotingTimeoutError), ...

Send failures carry `topic`, `brokers` (names tried) and `attempts` attributes and name them in
their message.
"""

from __future__ import annotations

from remoting.codes import ResponseCode, code_name
from remoting.errors import (
    RemotingConnectError,
    RemotingConnectionClosedError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
    RemotingTooMuchRequestError,
)

RemotingTimeout = RemotingTimeoutError

__all__ = [
    "BrokerNotExistError",
    "BrokerSystemError",
    "ConsumerNotOnlineError",
    "FlowControlError",
    "InvalidMessageError",
    "InvalidParameterError",
    "MQBrokerError",
    "MQClientError",
    "MessageIllegalError",
    "NoNameServerError",
    "NoPermissionError",
    "NoRouteError",
    "NotStartedError",
    "QueryNotFoundError",
    "RemotingConnectError",
    "RemotingConnectionClosedError",
    "RemotingError",
    "RemotingSendRequestError",
    "RemotingTimeout",
    "RemotingTimeoutError",
    "RemotingTooMuchRequestError",
    "RequestCodeNotSupportedError",
    "ServiceNotAvailableError",
    "SubscriptionGroupNotExistError",
    "SubscriptionNotExistError",
    "RequestTimeoutError",
    "SystemBusyError",
    "TopicExistAlreadyError",
    "TopicNotExistError",
    "annotate",
    "error_for_code",
]


class MQClientError(Exception):
    """The client cannot do what was asked (bad arguments, no route, no NameServer, wrong state)."""


class InvalidMessageError(MQClientError, ValueError):
    """The message fails client-side validation (topic name, empty or oversized body, batch rules)."""


class NotStartedError(MQClientError):
    """The producer/admin was not started, or was shut down."""


class NoRouteError(MQClientError):
    """The NameServer knows no route for the topic (and auto-creation did not apply)."""

    def __init__(self, topic: str, detail: str | None = None) -> None:
        msg = f"No route info of this topic: {topic}"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)
        self.topic = topic


class NoNameServerError(MQClientError):
    """No NameServer address configured, or none of them answered."""


class RequestTimeoutError(MQClientError, TimeoutError):
    """Producer.request() sent its message but no reply came within its timeout (RocketMQ's
    RequestTimeoutException)."""


class MQBrokerError(Exception):
    """A broker or NameServer answered a request with an error code."""

    code: int = -1

    def __init__(self, code: int, remark: str | None = None, addr: str | None = None) -> None:
        self.code = int(code)
        self.remark = remark or ""
        self.addr = addr
        where = f" from {addr}" if addr else ""
        name = code_name(self.code, response=True)
        super().__init__(f"{name} ({self.code}){where}: {self.remark or 'no remark'}")

    @property
    def response_code(self) -> int:
        return self.code


class BrokerSystemError(MQBrokerError):
    """SYSTEM_ERROR: the server failed while handling the request."""

    code = ResponseCode.SYSTEM_ERROR


class SystemBusyError(MQBrokerError):
    """SYSTEM_BUSY: the server is shedding load; retry after a short back-off."""

    code = ResponseCode.SYSTEM_BUSY


class RequestCodeNotSupportedError(MQBrokerError):
    """REQUEST_CODE_NOT_SUPPORTED: the server does not implement this request."""

    code = ResponseCode.REQUEST_CODE_NOT_SUPPORTED


class MessageIllegalError(MQBrokerError):
    """MESSAGE_ILLEGAL: the broker refused the message (size, topic, properties)."""

    code = ResponseCode.MESSAGE_ILLEGAL


class ServiceNotAvailableError(MQBrokerError):
    """SERVICE_NOT_AVAILABLE: the broker cannot take writes now (slave, disk full, shutting down)."""

    code = ResponseCode.SERVICE_NOT_AVAILABLE


class NoPermissionError(MQBrokerError):
    """NO_PERMISSION: the topic or broker is not writable/readable."""

    code = ResponseCode.NO_PERMISSION


class TopicNotExistError(MQBrokerError):
    """TOPIC_NOT_EXIST: the topic does not exist (and was not auto-created)."""

    code = ResponseCode.TOPIC_NOT_EXIST


class TopicExistAlreadyError(MQBrokerError):
    """TOPIC_EXIST_ALREADY: the topic exists already."""

    code = ResponseCode.TOPIC_EXIST_ALREADY


class QueryNotFoundError(MQBrokerError):
    """QUERY_NOT_FOUND: no message matched the query."""

    code = ResponseCode.QUERY_NOT_FOUND


class SubscriptionNotExistError(MQBrokerError):
    """SUBSCRIPTION_NOT_EXIST: the consumer's subscription is unknown to the broker."""

    code = ResponseCode.SUBSCRIPTION_NOT_EXIST


class SubscriptionGroupNotExistError(MQBrokerError):
    """SUBSCRIPTION_GROUP_NOT_EXIST: the consumer group does not exist."""

    code = ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


class InvalidParameterError(MQBrokerError):
    """INVALID_PARAMETER: a request parameter was rejected."""

    code = ResponseCode.INVALID_PARAMETER


class ConsumerNotOnlineError(MQBrokerError):
    """CONSUMER_NOT_ONLINE: no consumer of the group is connected."""

    code = ResponseCode.CONSUMER_NOT_ONLINE


class BrokerNotExistError(MQBrokerError):
    """BROKER_NOT_EXIST: the broker is unknown."""

    code = ResponseCode.BROKER_NOT_EXIST


class FlowControlError(MQBrokerError):
    """FLOW_CONTROL: the broker throttles this client."""

    code = ResponseCode.FLOW_CONTROL


_BY_CODE: dict[int, type[MQBrokerError]] = {
    c.code: c
    for c in (
        BrokerSystemError,
        SystemBusyError,
        RequestCodeNotSupportedError,
        MessageIllegalError,
        ServiceNotAvailableError,
        NoPermissionError,
        TopicNotExistError,
        TopicExistAlreadyError,
        QueryNotFoundError,
        SubscriptionNotExistError,
        SubscriptionGroupNotExistError,
        InvalidParameterError,
        ConsumerNotOnlineError,
        BrokerNotExistError,
        FlowControlError,
    )
}


def error_for_code(code: int, remark: str | None = None, addr: str | None = None) -> MQBrokerError:
    """The typed exception for a server's error response (MQBrokerError itself for other codes)."""
    cls = _BY_CODE.get(int(code))
    if cls is None:
        return MQBrokerError(code, remark, addr)
    return cls(code, remark, addr)


def annotate(e: BaseException, **context: object) -> BaseException:
    """Add context (topic=, brokers=, attempts=) to an exception's message and attributes, keeping its type."""
    parts = []
    for k, v in context.items():
        if v is None:
            continue
        setattr(e, k, v)
        if isinstance(v, list | tuple):
            v = ",".join(str(x) for x in v)
        parts.append(f"{k}={v}")
    if parts and e.args and isinstance(e.args[0], str):
        e.args = (f"{e.args[0]} [{', '.join(parts)}]", *e.args[1:])
    elif parts:
        e.args = (f"{type(e).__name__} [{', '.join(parts)}]",)
    return e
