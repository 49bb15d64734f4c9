"""The infer body decoder's forms, keyed by the JSON header's bytes: a header seen before is not
parsed again (the rule of which requests leave a form is ``frontends.forms``')."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from ptserve.common.errors import ServerError
from ptserve.frontends.http import codec


def body(header: dict[str, Any], *arrays: np.ndarray) -> tuple[bytes, int]:
    encoded = json.dumps(header).encode()
    return encoded + b"".join(a.tobytes() for a in arrays), len(encoded)


def binary_header(**extra: Any) -> dict[str, Any]:
    return {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "FP32",
                "shape": [1, 4],
                "parameters": {"binary_data_size": 16},
            }
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        **extra,
    }


def test_a_repeated_header_is_reused_with_the_new_data() -> None:
    cache = codec.HeaderCache()
    seen = []
    for step in range(3):
        data = np.full((1, 4), step, np.float32)
        raw, length = body(binary_header(), data)
        request = codec.decode_request("m", "", raw, length, None, cache)
        seen.append(request)
        assert request.inputs[0].data.tolist() == data.tolist()
        assert request.outputs is not None and request.outputs[0].parameters["binary_data"]
    assert cache.get(("m", "", raw[:length])) is not None
    assert len(cache) == 1
    # Each request gets its own parameters: the core may add to them.
    assert seen[1].parameters is not seen[2].parameters


def test_a_reused_header_still_checks_the_binary_size() -> None:
    cache = codec.HeaderCache()
    raw, length = body(binary_header(), np.zeros((1, 4), np.float32))
    codec.decode_request("m", "", raw, length, None, cache)
    with pytest.raises(ServerError, match="binary_data_size values add up to 16"):
        codec.decode_request("m", "", raw + b"\0", length, None, cache)
    with pytest.raises(ServerError, match="binary_data_size 16 overruns the body"):
        codec.decode_request("m", "", raw[:-4], length, None, cache)


def test_the_model_and_version_are_part_of_the_key() -> None:
    cache = codec.HeaderCache()
    raw, length = body(binary_header(), np.zeros((1, 4), np.float32))
    first = codec.decode_request("a", "", raw, length, None, cache)
    second = codec.decode_request("b", "2", raw, length, None, cache)
    assert (first.model_name, first.model_version) == ("a", "")
    assert (second.model_name, second.model_version) == ("b", "2")
    assert len(cache) == 2


def test_a_sequence_header_is_kept_with_its_own_values() -> None:
    """Its values are in the header's bytes, so a header seen again means the same values;
    each request gets a copy of the parameters (the core may add to them)."""
    cache = codec.HeaderCache()
    header = binary_header(parameters={"sequence_id": 7, "sequence_start": True})
    requests = []
    for step in range(2):
        raw, length = body(header, np.full((1, 4), step, np.float32))
        requests.append(codec.decode_request("m", "", raw, length, None, cache))
    assert len(cache) == 1
    assert requests[1].parameters == {"sequence_id": 7, "sequence_start": True}
    assert requests[0].parameters is not requests[1].parameters


@pytest.mark.parametrize(
    "header",
    [
        # Tensor data inside the header: its arrays would be shared between requests.
        {"inputs": [{"name": "I", "datatype": "INT32", "shape": [2], "data": [1, 2]}]},
        # Shared memory: what a region holds and whether it exists can change.
        {
            "inputs": [
                {
                    "name": "I",
                    "datatype": "FP32",
                    "shape": [1, 4],
                    "parameters": {"binary_data_size": 16},
                }
            ],
            "outputs": [
                {
                    "name": "O",
                    "parameters": {
                        "shared_memory_region": "r",
                        "shared_memory_byte_size": 16,
                    },
                }
            ],
        },
    ],
    ids=["json-data", "shared-memory"],
)
def test_headers_whose_decoding_can_differ_are_not_kept(header: dict[str, Any]) -> None:
    cache = codec.HeaderCache()
    has_binary = "binary_data_size" in header["inputs"][0].get("parameters", {})
    arrays = [np.zeros((1, 4), np.float32)] if has_binary else []
    raw, length = body(header, *arrays)
    codec.decode_request("m", "", raw, length, None, cache)
    assert cache.get(("m", "", raw[:length])) is None
    assert len(cache) == 0


def test_the_cache_starts_afresh_when_full() -> None:
    cache = codec.HeaderCache()
    for index in range(cache.limit + 1):
        raw, length = body(binary_header(id=str(index)), np.zeros((1, 4), np.float32))
        codec.decode_request("m", "", raw, length, None, cache)
    assert len(cache) == 1


def test_long_headers_are_not_kept() -> None:
    """A client cannot fill the server's memory with distinct huge headers."""
    cache = codec.HeaderCache()
    raw, length = body(
        binary_header(id="x" * codec.CACHED_HEADER_MAX), np.zeros((1, 4), np.float32)
    )
    request = codec.decode_request("m", "", raw, length, None, cache)
    assert request.id == "x" * codec.CACHED_HEADER_MAX
    assert len(cache) == 0
