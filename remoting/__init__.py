"""RocketMQ remoting protocol: sans-I/O codec, typed headers and bodies, thin asyncio shells."""

from .client import RemotingClient, split_addr
from .codec import MAX_FRAME_SIZE, FrameDecoder, decode_frame, encode, encode_parts
from .codes import LanguageCode, RemotingFlag, RequestCode, ResponseCode, SerializeType, code_name
from .command import RemotingCommand
from .connection import RemotingConnection, RequestContext, RequestDispatcher
from .errors import (
    ProtocolError,
    RemotingConnectError,
    RemotingConnectionClosedError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
    RemotingTooMuchRequestError,
)
from .headers import CommandHeader, HeaderError
from .server import RemotingServer

__all__ = [
    "MAX_FRAME_SIZE",
    "CommandHeader",
    "FrameDecoder",
    "HeaderError",
    "LanguageCode",
    "ProtocolError",
    "RemotingClient",
    "RemotingCommand",
    "RemotingConnectError",
    "RemotingConnection",
    "RemotingConnectionClosedError",
    "RemotingError",
    "RemotingFlag",
    "RemotingSendRequestError",
    "RemotingServer",
    "RemotingTimeoutError",
    "RemotingTooMuchRequestError",
    "RequestCode",
    "RequestContext",
    "RequestDispatcher",
    "ResponseCode",
    "SerializeType",
    "code_name",
    "decode_frame",
    "encode",
    "encode_parts",
    "split_addr",
]
