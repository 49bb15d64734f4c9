"""Property-based checks: whatever bytes arrive, the HTTP layer answers with a clear error.

The decoder either returns a request or raises a ``ServerError`` with a client status, and the
connection protocol never raises out of its callbacks.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptserve.common import datatypes
from ptserve.common.errors import ServerError, Status
from ptserve.frontends.http import codec
from ptserve.transports.http1 import HttpProtocol, HttpRequest, HttpResponse
from tests.frontends.elements import comparable

CLIENT_ERRORS = {Status.INVALID_ARGUMENT, Status.UNSUPPORTED}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)

input_entries = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["INPUT0", "INPUT1", "", 5]),
        "datatype": st.sampled_from([*datatypes.BY_NAME, "INT33", 3]),
        "shape": st.lists(st.integers(-2, 4), max_size=3) | json_values,
    },
    optional={
        "data": json_values,
        "parameters": st.fixed_dictionaries(
            {}, optional={"binary_data_size": st.integers(-4, 64) | json_values}
        ),
    },
)

headers = st.fixed_dictionaries(
    {"inputs": st.lists(input_entries, max_size=3) | json_values},
    optional={
        "id": json_values,
        "parameters": json_values,
        "outputs": st.lists(
            st.fixed_dictionaries({"name": json_values}, optional={"parameters": json_values}),
            max_size=2,
        )
        | json_values,
    },
)


def check_decode(body: bytes, header_length: int | None) -> None:
    """Decoded or refused with a client error; with the header cache, the second decoding (a
    cache hit when the header was kept) ends the same way as the first."""
    cache = codec.HeaderCache()
    outcomes = [_decode_once(body, header_length, cache) for _ in range(2)]
    outcomes.append(_decode_once(body, header_length, None))
    assert outcomes[0] == outcomes[1] == outcomes[2]


def _decode_once(body: bytes, header_length: int | None, cache: codec.HeaderCache | None) -> object:
    try:
        request = codec.decode_request("m", "", bytearray(body), header_length, None, cache)
    except ServerError as exc:
        assert exc.status in CLIENT_ERRORS, exc
        assert exc.message
        return exc.message
    for tensor in request.inputs:
        assert isinstance(tensor.data, np.ndarray)
        assert tensor.data.shape == tensor.shape
    return [(t.name, t.datatype.name, t.shape, comparable(t.data)) for t in request.inputs]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(header=headers, binary=st.binary(max_size=80))
def test_decoder_structured(header: dict[str, Any], binary: bytes) -> None:
    raw = json.dumps(header).encode()
    check_decode(raw + binary, len(raw))
    check_decode(raw, None)


@settings(max_examples=400, deadline=None)
@given(body=st.binary(max_size=200), length=st.none() | st.integers(-5, 220))
def test_decoder_random_bytes(body: bytes, length: int | None) -> None:
    check_decode(body, length)


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += bytes(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


async def echo(request: HttpRequest) -> HttpResponse:
    return HttpResponse.json({"path": request.path, "size": len(request.body)})


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.binary(max_size=60), max_size=6))
def test_protocol_never_raises(chunks: list[bytes]) -> None:
    async def run() -> None:
        protocol = HttpProtocol(echo, max_body=100)
        transport = FakeTransport()
        protocol.connection_made(transport)
        prefix = b"POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\n"
        for chunk in [prefix[: len(chunks) * 7], *chunks]:
            protocol.data_received(chunk)
        await asyncio.sleep(0)
        protocol.connection_lost(None)
        if transport.written:
            assert transport.written.startswith(b"HTTP/1.1 ")

    asyncio.run(run())
