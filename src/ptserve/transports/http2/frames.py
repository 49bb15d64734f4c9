"""HTTP/2 frames (RFC 9113 section 6): the constants, the payload fields a server reads, and the
frames it sends."""

from __future__ import annotations

import struct

from ptserve.transports.http2.policing import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    NO_ERROR,
    PING,
    PREFACE,
    PRIORITY,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
)

__all__ = [
    "ACK",
    "CONTINUATION",
    "DATA",
    "END_HEADERS",
    "END_STREAM",
    "ENHANCE_YOUR_CALM",
    "FRAME_SIZE_ERROR",
    "GOAWAY",
    "HEADERS",
    "NO_ERROR",
    "PING",
    "PREFACE",
    "PRIORITY",
    "PROTOCOL_ERROR",
    "PUSH_PROMISE",
    "REFUSED_STREAM",
    "RST_STREAM",
    "SETTINGS",
    "WINDOW_UPDATE",
]

HEADER_BYTES = 9

# Flags besides END_STREAM, ACK and END_HEADERS.
PADDED = 0x8
PRIORITY_FLAG = 0x20

# Settings identifiers.
HEADER_TABLE_SIZE = 0x1
ENABLE_PUSH = 0x2
MAX_CONCURRENT_STREAMS = 0x3
INITIAL_WINDOW_SIZE = 0x4
MAX_FRAME_SIZE = 0x5
MAX_HEADER_LIST_SIZE = 0x6

# Error codes besides those the policing uses.
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
CANCEL = 0x8
COMPRESSION_ERROR = 0x9

DEFAULT_WINDOW = 65_535
DEFAULT_MAX_FRAME = 16_384
LARGEST_FRAME = 2**24 - 1
LARGEST_WINDOW = 2**31 - 1

HEADER = struct.Struct(">HBBBL")  # length as 16 + 8 bits, type, flags, stream id
_SETTING = struct.Struct(">HL")
_U32 = struct.Struct(">L")
_PRIORITY = struct.Struct(">LB")  # exclusive bit and dependency, weight


class ConnectionError_(Exception):
    """A fault that ends the whole connection with GOAWAY and ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def header(length: int, kind: int, flags: int, stream_id: int) -> bytes:
    return HEADER.pack(length >> 8, length & 0xFF, kind, flags, stream_id)


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload) >> 8, len(payload) & 0xFF, kind, flags, stream_id) + payload


def parse_header(data: bytes | bytearray, offset: int) -> tuple[int, int, int, int]:
    """(payload length, type, flags, stream id) of the frame header at ``offset``."""
    high, low, kind, flags, stream_id = HEADER.unpack_from(data, offset)
    return (high << 8) | low, kind, flags, stream_id & 0x7FFF_FFFF


def strip_padding(payload: bytes, flags: int) -> bytes:
    """The payload without its padding (PADDED: a length byte first, that many at the end)."""
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ConnectionError_(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1 : len(payload) - payload[0]]


def header_block(payload: bytes, flags: int) -> tuple[bytes, int | None]:
    """A HEADERS frame's header block fragment, and the stream it depends on (PRIORITY flag)."""
    block = strip_padding(payload, flags)
    if not flags & PRIORITY_FLAG:
        return block, None
    if len(block) < 5:
        raise ConnectionError_(FRAME_SIZE_ERROR, "HEADERS too short for its priority")
    return block[5:], _U32.unpack_from(block)[0] & 0x7FFF_FFFF


def priority_dependency(payload: bytes) -> int:
    dependency: int = _PRIORITY.unpack_from(payload)[0] & 0x7FFF_FFFF
    return dependency


def settings(values: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(_SETTING.pack(k, v) for k, v in values.items()))


SETTINGS_ACK = frame(SETTINGS, ACK, 0)


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    """(identifier, value) pairs (the length, a multiple of 6, is checked by the policing)."""
    return [_SETTING.unpack_from(payload, i) for i in range(0, len(payload) - 5, 6)]


def parse_u32(payload: bytes) -> int:
    value: int = _U32.unpack_from(payload)[0]
    return value


def window_update(stream_id: int, increment: int) -> bytes:
    return HEADER.pack(0, 4, WINDOW_UPDATE, 0, stream_id) + _U32.pack(increment)


def rst_stream(stream_id: int, code: int) -> bytes:
    return HEADER.pack(0, 4, RST_STREAM, 0, stream_id) + _U32.pack(code)


def goaway(last_stream_id: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, _U32.pack(last_stream_id) + _U32.pack(code) + debug)


def ping_ack(payload: bytes) -> bytes:
    return HEADER.pack(0, 8, PING, ACK, 0) + payload


def data_header(stream_id: int, length: int, end_stream: bool = False) -> bytes:
    return HEADER.pack(length >> 8, length & 0xFF, DATA, END_STREAM if end_stream else 0, stream_id)


def headers(stream_id: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """A header block as HEADERS, and CONTINUATION frames when it is above ``max_frame``."""
    flags = END_STREAM if end_stream else 0
    size = len(block)
    if size <= max_frame:
        return HEADER.pack(size >> 8, size & 0xFF, HEADERS, flags | END_HEADERS, stream_id) + block
    parts = [block[i : i + max_frame] for i in range(0, size, max_frame)]
    out = [frame(HEADERS, flags, stream_id, parts[0])]
    out += [frame(CONTINUATION, 0, stream_id, part) for part in parts[1:-1]]
    out.append(frame(CONTINUATION, END_HEADERS, stream_id, parts[-1]))
    return b"".join(out)
