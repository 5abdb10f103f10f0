"""RemotingCommand.packed_ext (extFields already in msgpack form) is spliced into MSGPACK headers
unchanged in meaning; the msgpack decoder's shortcuts keep odd-but-valid headers working."""

from __future__ import annotations

import msgpack
import pytest

from remoting.codec import MAX_FRAME_SIZE, FrameDecoder, encode_msgpack_request_head, encode_parts
from remoting.codes import LanguageCode, SerializeType
from remoting.command import RemotingCommand
from remoting.errors import ProtocolError


@pytest.mark.parametrize("remark", [None, "", "a remark ✓"])
@pytest.mark.parametrize("opaque", [0, 127, 128, 70000, 0x7FFFFFFF])
def test_spliced_header_equals_packed_dict(remark: str | None, opaque: int) -> None:
    ext = {"a": "g", "b": "T", "i": "x" * 300}
    plain = RemotingCommand(310, opaque, 0, remark, ext, b"body", serialize_type=SerializeType.MSGPACK)
    spliced = RemotingCommand(310, opaque, 0, remark, dict(ext), b"body", serialize_type=SerializeType.MSGPACK)
    spliced.packed_ext = msgpack.packb(ext)
    h1, _ = encode_parts(plain)
    h2, _ = encode_parts(spliced)
    assert h1 == h2
    (got,) = FrameDecoder().feed(h2 + b"body")
    assert got == plain


def test_msgpack_header_with_unusual_language_and_number_types() -> None:
    for lang, want in ((3, LanguageCode.PYTHON), ("JAVA", LanguageCode.JAVA), (99, LanguageCode.OTHER)):
        header = msgpack.packb([10, lang, 395, 7, 0, None, {"k": "v"}])
        frame = (len(header) + 4).to_bytes(4, "big") + ((2 << 24) | len(header)).to_bytes(4, "big") + header
        (cmd,) = FrameDecoder().feed(frame)
        assert cmd.language is want and cmd.code == 10 and cmd.opaque == 7 and cmd.ext_fields == {"k": "v"}
    header = msgpack.packb([10.0, 0, 395.0, 7.0, 0, None, None])  # floats: coerced to int
    frame = (len(header) + 4).to_bytes(4, "big") + ((2 << 24) | len(header)).to_bytes(4, "big") + header
    (cmd,) = FrameDecoder().feed(frame)
    assert (cmd.code, cmd.version, cmd.opaque) == (10, 395, 7) and type(cmd.version) is int


@pytest.mark.parametrize("code", [310, 320, 10])
@pytest.mark.parametrize("opaque", [0, 127, 128, 255, 256, 65535, 65536, 0x7FFFFFFF])
@pytest.mark.parametrize("body", [b"", b"b" * 1500])
def test_request_head_without_command_is_encode_parts_bytes(code: int, opaque: int, body: bytes) -> None:
    ext = {"a": "g", "b": "T", "i": "x" * 300}
    packed = msgpack.packb(ext)
    cmd = RemotingCommand(code, opaque, 0, None, ext, body, serialize_type=SerializeType.MSGPACK)
    head, _ = encode_parts(cmd)
    for parts in ((packed,), (packed[:5], packed[5:]), (packed[:1], b"", packed[1:])):
        assert encode_msgpack_request_head(code, opaque, parts, len(body)) == head
    (got,) = FrameDecoder().feed(head + body)
    assert got == RemotingCommand(code, opaque, 0, None, ext, body or None, serialize_type=SerializeType.MSGPACK)


def test_request_head_without_command_checks_the_frame_limit() -> None:
    with pytest.raises(ProtocolError):
        encode_msgpack_request_head(310, 1, (msgpack.packb({}),), MAX_FRAME_SIZE)
