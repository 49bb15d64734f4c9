"""A gRPC request's header fields read into what a call needs, and the response's fields.

(h2 does the HPACK; these are the fields before and after it.)"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass

# gRPC's timeout units, as seconds.
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
# Headers that are part of the transport, not metadata the application sees.
_TRANSPORT = frozenset(
    {"content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding"}
)

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


# Response headers, as h2 takes them.
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
