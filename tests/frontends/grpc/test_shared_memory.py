"""System shared memory through tritonclient when the server allows it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests.frontends.grpc.conftest import identity_name


@pytest.fixture()
def regions(shm_client: grpcclient.InferenceServerClient) -> Iterator[dict[str, Any]]:
    """An input and an output region (unique keys per test process), cleaned up after."""
    suffix = f"{os.getpid()}"
    handles = {
        "in": shm.create_shared_memory_region("in", f"/ptserve_in_{suffix}", 64),
        "out": shm.create_shared_memory_region("out", f"/ptserve_out_{suffix}", 64),
        "suffix": suffix,
    }
    yield handles
    shm_client.unregister_system_shared_memory()
    shm.destroy_shared_memory_region(handles["in"])
    shm.destroy_shared_memory_region(handles["out"])


def _error(call: Any, *args: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as error:
        call(*args)
    return error.value


def test_inputs_and_outputs_in_shared_memory(
    shm_client: grpcclient.InferenceServerClient, regions: dict[str, Any]
) -> None:
    data = np.arange(8, dtype=np.int32).reshape(2, 4)
    # the tensor sits 16 bytes into a region that itself starts 8 bytes into the object
    shm.set_shared_memory_region(regions["in"], [data], offset=24)
    shm_client.register_system_shared_memory("in", f"/ptserve_in_{regions['suffix']}", 56, 8)
    shm_client.register_system_shared_memory("out", f"/ptserve_out_{regions['suffix']}", 64)
    status = shm_client.get_system_shared_memory_status(as_json=True)["regions"]
    assert status["in"]["byte_size"] == "56"
    assert status["in"]["offset"] == "8"
    assert set(status) == {"in", "out"}

    tensor = grpcclient.InferInput("INPUT0", [2, 4], "INT32")
    tensor.set_shared_memory("in", data.nbytes, offset=16)
    output = grpcclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("out", 64)
    result = shm_client.infer(identity_name("INT32"), [tensor], outputs=[output])
    described = result.get_output("OUTPUT0")
    assert described.datatype == "INT32"
    assert list(described.shape) == [2, 4]
    assert result.get_response().raw_output_contents == [b""]
    stored = shm.get_contents_as_numpy(regions["out"], np.int32, [2, 4])
    np.testing.assert_array_equal(stored, data)

    shm_client.unregister_system_shared_memory("in")
    assert set(shm_client.get_system_shared_memory_status(as_json=True)["regions"]) == {"out"}
    gone = _error(shm_client.infer, identity_name("INT32"), [tensor])
    assert gone.status() == "StatusCode.NOT_FOUND"
    assert "unable to find system shared memory region: 'in'" in gone.message()


def test_shared_memory_mistakes(
    shm_client: grpcclient.InferenceServerClient, regions: dict[str, Any]
) -> None:
    key = f"/ptserve_in_{regions['suffix']}"
    missing = _error(shm_client.register_system_shared_memory, "x", "/ptserve_no_such_key", 8)
    assert missing.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unable to open shared memory region 'x'" in missing.message()
    too_big = _error(shm_client.register_system_shared_memory, "x", key, 65)
    assert too_big.status() == "StatusCode.INVALID_ARGUMENT"
    assert "exceeds the 64 bytes" in too_big.message()

    shm_client.register_system_shared_memory("in", key, 32)
    twice = _error(shm_client.register_system_shared_memory, "in", key, 32)
    assert twice.status() == "StatusCode.ALREADY_EXISTS"

    unknown = _error(shm_client.get_system_shared_memory_status, "nothing")
    assert unknown.status() == "StatusCode.NOT_FOUND"

    tensor = grpcclient.InferInput("INPUT0", [1, 8], "INT32")
    tensor.set_shared_memory("in", 32, offset=8)
    outside = _error(shm_client.infer, identity_name("INT32"), [tensor])
    assert outside.status() == "StatusCode.INVALID_ARGUMENT"
    assert "Invalid offset + byte size for shared memory region: 'in'" in outside.message()

    tensor = grpcclient.InferInput("INPUT0", [1, 8], "INT32")
    tensor.set_shared_memory("in", 32)
    output = grpcclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("in", 16)
    small = _error(lambda: shm_client.infer(identity_name("INT32"), [tensor], outputs=[output]))
    assert small.status() == "StatusCode.INVALID_ARGUMENT"
    assert "needs 32 bytes" in small.message()
