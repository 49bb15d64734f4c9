"""HPACK for the gRPC transport: request headers decoded (and the outcome kept for a header
block seen before), response headers encoded without the dynamic table so they can be built once.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass

import hpack

from ptserve.core.memo import Memo
from ptserve.frontends.grpc.native import frames

# gRPC's timeout units, as seconds.
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
# Headers that are part of the transport, not metadata the application sees.
_TRANSPORT = frozenset(
    {"content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding"}
)
_SEEN_LIMIT = 64

Metadata = tuple[tuple[str, str | bytes], ...]


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What a request's header block says, checked no further than parsing."""

    method: str
    path: str
    content_type: str
    timeout: float | None  # seconds, from grpc-timeout
    encoding: str  # grpc-encoding of compressed messages; "identity" when absent
    metadata: Metadata


def parse_timeout(value: str) -> float:
    """``grpc-timeout`` (up to 8 digits and a unit) in seconds; ValueError when malformed."""
    if not 2 <= len(value) <= 9 or not value[:-1].isdigit() or value[-1] not in _TIMEOUT_UNITS:
        raise ValueError(f"malformed grpc-timeout '{value}'")
    return int(value[:-1]) * _TIMEOUT_UNITS[value[-1]]


def _metadata_value(name: str, raw: bytes) -> str | bytes:
    if not name.endswith("-bin"):
        return raw.decode("latin-1")
    try:  # binary metadata is base64, padded or not
        return base64.b64decode(raw + b"=" * (-len(raw) % 4))
    except binascii.Error:
        return raw


def request_head(fields: Iterable[tuple[bytes, bytes]]) -> RequestHead:
    """Raises ValueError naming a malformed field."""
    method = path = content_type = ""
    encoding = "identity"
    timeout: float | None = None
    metadata: list[tuple[str, str | bytes]] = []
    for raw_name, raw_value in fields:
        name = raw_name.decode("latin-1")
        if name[:1] == ":":
            if name == ":method":
                method = raw_value.decode("latin-1")
            elif name == ":path":
                path = raw_value.decode("latin-1")
            continue
        if name in _TRANSPORT:
            value = raw_value.decode("latin-1")
            if name == "content-type":
                content_type = value
            elif name == "grpc-timeout":
                timeout = parse_timeout(value)
            elif name == "grpc-encoding":
                encoding = value
            continue
        metadata.append((name, _metadata_value(name, raw_value)))
    return RequestHead(method, path, content_type, timeout, encoding, tuple(metadata))


class HeaderDecoder:
    """One connection's HPACK decoder. A block that left the dynamic table as it was decodes
    the same way for as long as the table stays so; clients repeat such blocks (every field
    indexed) on each call, so their outcome is kept until the table changes."""

    def __init__(self, max_header_list_size: int) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=max_header_list_size)
        self._seen: Memo[bytes, RequestHead] = Memo(_SEEN_LIMIT)

    def decode(self, block: bytes) -> RequestHead:
        """Raises frames.ConnectionError_ (COMPRESSION_ERROR) when the block cannot be decoded
        and ValueError when a decoded field is malformed."""
        found = self._seen.get(block)
        if found is not None:
            return found
        table = self._decoder.header_table
        size, first, limit = len(table.dynamic_entries), _first(table), table.maxsize
        try:
            fields = self._decoder.decode(block, raw=True)
        except hpack.HPACKError as exc:
            raise frames.ConnectionError_(
                frames.COMPRESSION_ERROR, f"bad header block: {exc}"
            ) from None
        unchanged = (
            len(table.dynamic_entries) == size and _first(table) is first and table.maxsize == limit
        )
        if not unchanged:  # before parsing, which may refuse the block: the table moved on
            self._seen = Memo(_SEEN_LIMIT)
        head = request_head(fields)
        if unchanged:
            self._seen.put(block, head)
        return head


def _first(table: hpack.table.HeaderTable) -> object:
    """The newest entry: an insertion puts a new tuple first (compared by identity, since
    re-inserting an equal field still shifts every index); evictions shorten the table and size
    updates change its limit."""
    entries = table.dynamic_entries
    return entries[0] if entries else None


def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(data: bytes) -> bytes:
    return _integer(len(data), 7, 0) + data


def literal(name: str, value: str | bytes) -> bytes:
    """A field as 'literal without indexing, new name' (no table, no Huffman)."""
    raw = value.encode("latin-1") if isinstance(value, str) else value
    return b"\x00" + _string(name.encode("latin-1")) + _string(raw)


STATUS_200 = b"\x88"  # static table entry 8
CONTENT_TYPE = literal("content-type", "application/grpc")
RESPONSE_HEAD = STATUS_200 + CONTENT_TYPE + literal("grpc-accept-encoding", "identity,deflate,gzip")
TRAILERS_OK = literal("grpc-status", "0")


def status_block(code: int, message: str) -> bytes:
    """``grpc-status`` and ``grpc-message`` (percent-encoded as gRPC asks)."""
    block = literal("grpc-status", str(code))
    if message:
        block += literal("grpc-message", percent_encode(message))
    return block


def percent_encode(message: str) -> bytes:
    out = bytearray()
    for byte in message.encode("utf-8"):
        if 0x20 <= byte <= 0x7E and byte != 0x25:
            out.append(byte)
        else:
            out += b"%%%02X" % byte
    return bytes(out)


def response_block(status: int) -> bytes:
    """A bare HTTP status, for requests that are not gRPC at all."""
    return b"\x00" + _string(b":status") + _string(str(status).encode())
