"""Content-Encoding of request and response bodies: gzip and deflate (zlib), bounded in size."""

from __future__ import annotations

import functools
import zlib

from ptserve.common.errors import invalid_arg, unsupported

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decompress(body: bytearray, encoding: str, limit: int) -> bytes | bytearray:
    """The decoded body; refuses encodings other than gzip/deflate/identity and oversize output."""
    encoding = encoding.strip().lower()
    if not encoding or encoding == "identity":
        return body
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise unsupported(
            f"unsupported Content-Encoding '{encoding}': expected gzip, deflate or identity"
        )
    decoder = zlib.decompressobj(wbits)
    try:
        data = decoder.decompress(bytes(body), limit + 1)
    except zlib.error as exc:
        raise invalid_arg(f"failed to decompress the {encoding} request body: {exc}") from None
    if len(data) > limit or decoder.unconsumed_tail:
        raise invalid_arg(
            f"the decompressed request body exceeds the maximum allowed size of {limit} bytes "
            "(--http-max-input-size)"
        )
    if not decoder.eof:
        raise invalid_arg(f"the {encoding} request body is truncated")
    return data


@functools.lru_cache(maxsize=64)
def choose_encoding(accept: str) -> str:
    """The response encoding to use for an Accept-Encoding header ('' for none)."""
    if not accept:
        return ""
    offered: list[tuple[float, str]] = []
    for item in accept.split(","):
        name, _, params = item.strip().partition(";")
        name = name.strip().lower()
        quality = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                quality = float(params[2:])
            except ValueError:
                quality = 0.0
        if name in _WBITS and quality > 0:
            offered.append((quality, name))
    if not offered:
        return ""
    offered.sort(key=lambda pair: (-pair[0], pair[1] != "gzip"))
    return offered[0][1]


def compress(parts: list[bytes | memoryview], encoding: str) -> bytes:
    encoder = zlib.compressobj(6, zlib.DEFLATED, _WBITS[encoding])
    chunks = [encoder.compress(part) for part in parts]
    chunks.append(encoder.flush())
    return b"".join(chunks)
