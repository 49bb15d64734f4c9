"""HPACK and the fields of a gRPC call: a request's header block decoded (its outcome kept for a
block seen before) and read into what a call needs; the response's fields, and their blocks
encoded without the dynamic table, so that the usual ones are constant bytes."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import hpack

from ptserve.common.memo import Memo

# gRPC's timeout units, as seconds.
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
# Headers that are part of the transport, not metadata the application sees.
_TRANSPORT = frozenset(
    {"content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding"}
)

# Header fields that RFC 9113 section 8.2.2 forbids in HTTP/2.
_CONNECTION_SPECIFIC = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)
_REQUEST_PSEUDO = frozenset({b":method", b":scheme", b":path", b":authority"})
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


# Response header fields (``encode`` makes their blocks).
Fields = list[tuple[bytes, bytes]]
RESPONSE_HEAD: Fields = [
    (b":status", b"200"),
    (b"content-type", b"application/grpc"),
    (b"grpc-accept-encoding", b"identity,deflate,gzip"),
]
TRAILERS_OK: Fields = [(b"grpc-status", b"0")]


def status_fields(code: int, message: str) -> Fields:
    """``grpc-status`` and ``grpc-message`` (percent-encoded as gRPC asks)."""
    fields = [(b"grpc-status", str(code).encode())]
    if message:
        fields.append((b"grpc-message", percent_encode(message)))
    return fields


def percent_encode(message: str) -> bytes:
    out = bytearray()
    for byte in message.encode("utf-8"):
        if 0x20 <= byte <= 0x7E and byte != 0x25:
            out.append(byte)
        else:
            out += b"%%%02X" % byte
    return bytes(out)


def response_fields(status: int) -> Fields:
    """A bare HTTP status, for requests that are not gRPC at all."""
    return [(b":status", str(status).encode())]


def header_list_size(fields: Iterable[tuple[bytes, bytes]]) -> int:
    """The size SETTINGS_MAX_HEADER_LIST_SIZE limits (RFC 9113 section 6.5.2)."""
    return sum(len(name) + len(value) + 32 for name, value in fields)


def malformed(fields: Iterable[tuple[bytes, bytes]], trailers: bool = False) -> str | None:
    """Why a request's (or its trailers') field list is malformed (RFC 9113 section 8.2 and
    8.3.1), or None."""
    regular = False
    pseudo: set[bytes] = set()
    for name, value in fields:
        if name != name.lower():
            return "an uppercase header field name"
        if name[:1] == b":":
            if trailers or regular:
                return "a pseudo-header field after the regular ones or in trailers"
            if name not in _REQUEST_PSEUDO or name in pseudo:
                return f"the pseudo-header field {name.decode('latin-1')!r} unknown or repeated"
            if not value and name != b":authority":
                return f"an empty {name.decode('latin-1')} pseudo-header field"
            pseudo.add(name)
            continue
        regular = True
        if name in _CONNECTION_SPECIFIC:
            return f"the connection-specific header field {name.decode('latin-1')!r}"
        if name == b"te" and value != b"trailers":
            return "a te header field other than 'trailers'"
    if not trailers and len(pseudo) < 3 and not _is_connect(pseudo):
        return "a request without :method, :scheme and :path"
    return None


def _is_connect(pseudo: set[bytes]) -> bool:
    return b":method" in pseudo and b":scheme" not in pseudo and b":path" not in pseudo


class HeaderError(Exception):
    """A header block that cannot be decoded: the connection ends with ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB


@dataclass(frozen=True, slots=True)
class Decoded:
    """A request header block, read: its head (None when ``error`` says it is malformed), the
    size of its field list, and the reason it cannot start a call."""

    head: RequestHead | None
    size: int
    malformed: str | None
    error: str | None  # a field that could not be read (grpc-timeout)


class HeaderDecoder:
    """One connection's HPACK decoder (the ``hpack`` package). A block that leaves the dynamic
    table as it was decodes the same way for as long as the table stays so; clients repeat such
    blocks (every field indexed) on each call, so their outcome is kept. Whether a block changes
    the table is read from its representations (RFC 7541 section 6), not from the decoder: a
    literal with incremental indexing or a size update does; a block that does is never kept,
    and the ones kept are forgotten."""

    def __init__(self, max_header_list_size: int) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=max_header_list_size)
        self._seen: Memo[bytes, Decoded] = Memo(_SEEN_LIMIT)

    def fields(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """Raises HeaderError."""
        try:
            fields = cast(list[tuple[bytes, bytes]], self._decoder.decode(block, raw=True))
        except hpack.OversizedHeaderListError as oversized:
            raise HeaderError(ENHANCE_YOUR_CALM, f"header list too large: {oversized}") from None
        except hpack.HPACKError as bad:
            raise HeaderError(COMPRESSION_ERROR, f"bad header block: {bad}") from None
        except (IndexError, ValueError, UnicodeDecodeError) as broken:
            raise HeaderError(COMPRESSION_ERROR, f"bad header block: {broken!r}") from None
        if changes_table(block):
            self._seen = Memo(_SEEN_LIMIT)
        return fields

    def request(self, block: bytes) -> Decoded:
        """A request's header block read (raises HeaderError)."""
        found = self._seen.get(block)
        if found is not None:
            return found
        kept = not changes_table(block)
        fields = self.fields(block)
        size = header_list_size(fields)
        reason = malformed(fields)
        head: RequestHead | None = None
        error = None
        try:
            head = request_head(fields)
        except ValueError as exc:
            error = str(exc)
        decoded = Decoded(head, size, reason, error)
        if kept:
            self._seen.put(block, decoded)
        return decoded

    def trailers(self, block: bytes) -> str | None:
        """A request's trailers decoded (for the table's sake): why they are malformed, or
        None (raises HeaderError)."""
        return malformed(self.fields(block), trailers=True)


def changes_table(block: bytes) -> bool:
    """Whether decoding ``block`` inserts into the dynamic table or resizes it (True as well for
    a block too short for what it says: the decoder refuses those)."""
    position, size = 0, len(block)
    while position < size:
        first = block[position]
        if first & 0x80:  # indexed field
            position = _skip_integer(block, position, 0x7F)
            continue
        if first & 0xC0 == 0x40 or first & 0xE0 == 0x20:  # incremental indexing; size update
            return True
        index_zero = not first & 0x0F
        position = _skip_integer(block, position, 0x0F)
        if index_zero:
            position = _skip_string(block, position)
        position = _skip_string(block, position)
    return position != size


def _skip_integer(block: bytes, position: int, mask: int) -> int:
    """Where the integer with ``mask`` as its prefix, at ``position``, ends."""
    if block[position] & mask != mask:
        return position + 1
    position += 1
    size = len(block)
    while position < size and block[position] & 0x80:
        position += 1
    return position + 1


def _skip_string(block: bytes, position: int) -> int:
    size = len(block)
    if position >= size:
        return size + 1
    first = block[position]
    length = first & 0x7F
    if length == 0x7F:
        length, shift, position = 0x7F, 0, position + 1
        while position < size:
            byte = block[position]
            length += (byte & 0x7F) << shift
            shift += 7
            position += 1
            if not byte & 0x80:
                break
        else:
            return size + 1
        return position + length
    return position + 1 + length


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


def encode(fields: Fields) -> bytes:
    """A header block that leaves the peer's table as it was: ``:status: 200`` from the static
    table, every other field a literal without indexing (and without Huffman coding)."""
    out = []
    for name, value in fields:
        if name == b":status":
            out.append(b"\x88" if value == b"200" else b"\x08" + _string(value))
        else:
            out.append(b"\x00" + _string(name) + _string(value))
    return b"".join(out)


RESPONSE_HEAD_BLOCK = encode(RESPONSE_HEAD)
TRAILERS_OK_BLOCK = encode(TRAILERS_OK)
