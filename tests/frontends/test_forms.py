"""The request-form rule both frontends share, and the output parameters both read alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from ptserve.common.errors import ServerError
from ptserve.common.requests import Placement
from ptserve.core.shared_memory import SharedMemoryRegistry
from ptserve.frontends.forms import FormCache, placement, requested_output
from ptserve.frontends.grpc import convert
from ptserve.frontends.http import codec

REGION = {"shared_memory_region": "r", "shared_memory_byte_size": 16}


@pytest.fixture()
def registry(tmp_path: Path) -> SharedMemoryRegistry:
    (tmp_path / "key").write_bytes(bytes(64))
    shm = SharedMemoryRegistry(True, root=tmp_path)
    shm.register("r", "key", 0, 64)
    return shm


def http_request(case: str) -> tuple[bytes, int]:
    entry: dict[str, Any] = {"name": "I", "datatype": "FP32", "shape": [1, 4]}
    output: dict[str, Any] = {"name": "O"}
    binary = b""
    if case == "values":
        entry["data"] = [0.0] * 4
    elif case == "input-in-shared-memory":
        entry["parameters"] = dict(REGION)
    else:
        entry["parameters"] = {"binary_data_size": 16}
        binary = bytes(16)
    if case == "output-in-shared-memory":
        output["parameters"] = dict(REGION)
    header = json.dumps({"inputs": [entry], "outputs": [output]}).encode()
    return header + binary, len(header)


def grpc_request(case: str) -> Any:
    message = pb.ModelInferRequest(model_name="m")
    entry = message.inputs.add(name="I", datatype="FP32", shape=[1, 4])
    output = message.outputs.add(name="O")
    if case == "values":
        entry.contents.fp32_contents.extend([0.0] * 4)
    elif case == "input-in-shared-memory":
        for key, value in REGION.items():
            convert.set_parameter(entry.parameters[key], value)
    else:
        message.raw_input_contents.append(bytes(16))
    if case == "output-in-shared-memory":
        for key, value in REGION.items():
            convert.set_parameter(output.parameters[key], value)
    return message


@pytest.mark.parametrize(
    ("case", "kept"),
    [
        ("raw", True),
        ("values", False),  # JSON / typed values: decoded every time
        ("input-in-shared-memory", False),  # what a region holds changes between requests
        ("output-in-shared-memory", False),  # and whether it is registered
    ],
)
def test_both_frontends_keep_the_same_forms(
    case: str, kept: bool, registry: SharedMemoryRegistry
) -> None:
    http_forms, grpc_forms = FormCache(), FormCache()
    body, length = http_request(case)
    message = grpc_request(case)
    for _ in range(2):
        from_http = codec.decode_request("m", "", body, length, registry, http_forms)
        from_grpc = convert.decode_request(message, registry, grpc_forms)
        assert from_http.inputs[0].data.tolist() == from_grpc.inputs[0].data.tolist()
    assert (len(http_forms), len(grpc_forms)) == ((1, 1) if kept else (0, 0))


def test_placement_parameters() -> None:
    assert placement("input 'x'", {}) is None
    found = placement(
        "input 'x'",
        {"shared_memory_region": "r", "shared_memory_byte_size": 4, "shared_memory_offset": 2},
    )
    assert found == Placement("r", 4, 2)
    with pytest.raises(ServerError, match="needs shared_memory_byte_size"):
        placement("input 'x'", {"shared_memory_region": "r"})
    with pytest.raises(ServerError, match="non-negative integer"):
        placement("input 'x'", {"shared_memory_region": "r", "shared_memory_byte_size": -1})


def test_requested_outputs_are_read_once_and_alike() -> None:
    output = requested_output("O", {"classification": 2, "binary_data": True, **REGION}, 0)
    assert (output.name, output.classification) == ("O", 2)
    assert output.placement == Placement("r", 16, 0)
    for params, message in (
        ({"classification": "2"}, "classification must be an integer"),
        ({"classification": True}, "classification must be an integer"),
        ({"binary_data": 1}, "binary_data must be true or false"),
        ({"shared_memory_region": "r"}, "needs shared_memory_byte_size"),
    ):
        with pytest.raises(ServerError, match=message):
            requested_output("O", params, 0)
    with pytest.raises(ServerError, match=r"outputs\[3\] must have a non-empty string 'name'"):
        requested_output("", {}, 3)


def test_a_form_gives_each_request_its_own_data_and_parameters() -> None:
    forms = FormCache()
    header = json.dumps(
        {
            "id": "x",
            "parameters": {"priority": 1},
            "inputs": [
                {
                    "name": "I",
                    "datatype": "INT32",
                    "shape": [2],
                    "parameters": {"binary_data_size": 8},
                }
            ],
        }
    ).encode()
    first = codec.decode_request(
        "m", "", header + np.array([1, 2], np.int32).tobytes(), len(header), None, forms
    )
    second = codec.decode_request(
        "m", "", header + np.array([3, 4], np.int32).tobytes(), len(header), None, forms
    )
    assert len(forms) == 1
    assert (first.id, second.id) == ("x", "x")
    assert first.inputs[0].data.tolist() == [1, 2]
    assert second.inputs[0].data.tolist() == [3, 4]
    assert second.parameters == {"priority": 1}
    assert first.parameters is not second.parameters
