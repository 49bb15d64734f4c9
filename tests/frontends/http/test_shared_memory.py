"""System shared memory over HTTP: tensors in and out of regions the client registers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from tests.frontends.http.rawhttp import error_of, request
from tests.serverproc import ServerProcess


def test_refused_unless_allowed(http_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(http_server.http_url)
    handle = shm.create_shared_memory_region("refused", "/ptserve_refused", 64)
    try:
        with pytest.raises(httpclient.InferenceServerException) as info:
            client.register_system_shared_memory("refused", "/ptserve_refused", 64)
        assert "--allow-client-shm" in info.value.message()
    finally:
        shm.destroy_shared_memory_region(handle)
    status, _, body = request(
        http_server.http_url, "POST", "/v2/cudasharedmemory/region/x/register", b"{}"
    )
    assert status == 501
    assert "CUDA shared memory is not supported" in error_of(body)


def test_inputs_and_outputs_in_shared_memory(example_repository: Path) -> None:
    with ServerProcess([example_repository], ["--allow-client-shm=true"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        b = np.full((1, 16), 3, dtype=np.int32)
        inputs_handle = shm.create_shared_memory_region("in", "/ptserve_http_in", 128)
        outputs_handle = shm.create_shared_memory_region("out", "/ptserve_http_out", 128)
        try:
            shm.set_shared_memory_region(inputs_handle, [a])
            shm.set_shared_memory_region(inputs_handle, [b], offset=64)
            client.register_system_shared_memory("in", "/ptserve_http_in", 128)
            client.register_system_shared_memory("out", "/ptserve_http_out", 128)
            status = client.get_system_shared_memory_status()
            assert {r["name"] for r in status} == {"in", "out"}
            assert client.get_system_shared_memory_status("in")[0]["byte_size"] == 128

            inputs = [
                httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                httpclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            inputs[0].set_shared_memory("in", 64)
            inputs[1].set_shared_memory("in", 64, offset=64)
            outputs = [
                httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
                httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
            ]
            outputs[0].set_shared_memory("out", 64)
            outputs[1].set_shared_memory("out", 64, offset=64)
            result = client.infer("simple", inputs, outputs=outputs)
            entry = result.get_output("OUTPUT0")
            assert entry["parameters"]["shared_memory_region"] == "out"
            total = shm.get_contents_as_numpy(outputs_handle, np.int32, [1, 16])
            difference = shm.get_contents_as_numpy(outputs_handle, np.int32, [1, 16], offset=64)
            np.testing.assert_array_equal(total, a + b)
            np.testing.assert_array_equal(difference, a - b)

            outputs[1].set_shared_memory("out", 32, offset=64)
            with pytest.raises(httpclient.InferenceServerException, match="needs 64 bytes"):
                client.infer("simple", inputs, outputs=outputs)
            inputs[0].set_shared_memory("in", 64, offset=100)
            with pytest.raises(httpclient.InferenceServerException, match="is outside"):
                client.infer("simple", inputs)

            client.unregister_system_shared_memory("in")
            assert [r["name"] for r in client.get_system_shared_memory_status()] == ["out"]
            inputs[0].set_shared_memory("in", 64)
            with pytest.raises(httpclient.InferenceServerException, match="unable to find"):
                client.infer("simple", inputs)
            client.unregister_system_shared_memory()
            assert client.get_system_shared_memory_status() == []
        finally:
            shm.destroy_shared_memory_region(inputs_handle)
            shm.destroy_shared_memory_region(outputs_handle)
