"""The example server answers a real tritonclient call."""

from __future__ import annotations

import numpy as np
import tritonclient.http as httpclient

from tests.serverproc import ServerProcess


def test_simple_over_http(example_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(example_server.http_url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
