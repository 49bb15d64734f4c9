"""Device tensors (``TorchArray``) through the backend: used in place, never through numpy.

On a CPU-only machine a CPU ``TorchArray`` stands in for a CUDA one: the instance's device is the
tensor's, so the runner must hand the caller's tensor itself to the model. Results on a device
are shown with the ``meta`` device, whose data cannot reach the host at all.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ptserve.backends.pytorch.convert import TorchArray
from ptserve.backends.pytorch.outputs import OutputPlan
from ptserve.common.device import to_host
from ptserve.common.prepared import PreparedRequest
from ptserve.config.io import model_io
from ptserve.config.parse import parse_config
from tests.backends.pytorch.helpers import load_instances, write_python_model

POINTER = """
    import torch
    from torch import nn

    class Pointer(nn.Module):
        def forward(self, x):
            where = torch.full([x.size(0), 1], x.data_ptr(), dtype=torch.int64)
            return x * 2, where
"""


@pytest.fixture(scope="module")
def pointer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_python_model(
        tmp_path_factory.mktemp("device") / "repo",
        "pointer",
        """
        name: "pointer"
        backend: "pytorch"
        runtime: "model.py"
        max_batch_size: 8
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] },
                 { name: "ptr" data_type: TYPE_INT64 dims: [ 1 ] } ]
        parameters { key: "TORCH_COMPILE_OPTIONAL_PARAMETERS"
                     value: { string_value: "{\\"disable\\": true}" } }
        """,
        POINTER,
    )


def test_a_device_tensor_on_the_instances_device_reaches_the_model_itself(pointer: Path) -> None:
    (instance,) = load_instances(pointer)
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    request = PreparedRequest("a", {"x": TorchArray(x)}, 2, ("y", "ptr"))
    (result,) = instance.execute([request]).results
    assert isinstance(result, dict)
    assert int(to_host(result["ptr"])[0, 0]) == x.data_ptr()
    np.testing.assert_array_equal(to_host(result["y"]), (x * 2).numpy())


def test_device_and_numpy_requests_share_a_batch(pointer: Path) -> None:
    (instance,) = load_instances(pointer)
    host = np.ones((1, 3), dtype=np.float32)
    device = torch.full((2, 3), 5.0)
    batch = [
        PreparedRequest("h", {"x": host}, 1, ("y",)),
        PreparedRequest("d", {"x": TorchArray(device)}, 2, ("y",)),
    ]
    first, second = instance.execute(batch).results
    assert isinstance(first, dict) and isinstance(second, dict)
    assert isinstance(first["y"], np.ndarray)  # a request with host inputs gets numpy
    np.testing.assert_array_equal(first["y"], np.full((1, 3), 2.0))
    np.testing.assert_array_equal(to_host(second["y"]), np.full((2, 3), 10.0))


def _plan() -> OutputPlan:
    config = parse_config(
        'name: "m" max_batch_size: 8 input { name: "I" data_type: TYPE_FP32 dims: [2] } '
        'output { name: "O" data_type: TYPE_FP32 dims: [2] } '
        'output { name: "S" data_type: TYPE_STRING dims: [1] reshape: { shape: [] } }',
        "m",
    )
    return OutputPlan("m", model_io(config))


def test_results_on_a_device_are_sliced_there_for_requests_with_device_inputs() -> None:
    raw = torch.empty(3, 2, device="meta")  # any copy to the host would raise
    requests = [
        PreparedRequest("a", {"I": TorchArray(torch.empty(1, 2, device="meta"))}, 1, ("O",)),
        PreparedRequest("b", {"I": TorchArray(torch.empty(2, 2, device="meta"))}, 2, ("O",)),
    ]
    first, second = _plan().split(raw, requests)
    assert isinstance(first["O"], TorchArray) and isinstance(second["O"], TorchArray)
    assert first["O"].shape == (1, 2) and second["O"].shape == (2, 2)
    views = [first["O"].tensor, second["O"].tensor]
    assert all(v._is_view() and v._base is not None and v._base.shape == (3, 2) for v in views)
    assert [v.storage_offset() for v in views] == [0, 2]  # rows 0 and 1-2 of the batch result
    assert second["O"].device == "meta"


def test_strings_and_host_results_stay_numpy_for_device_requests() -> None:
    request = PreparedRequest("a", {"I": TorchArray(torch.zeros(1, 2))}, 1, ("O", "S"))
    (parts,) = _plan().split((torch.ones(1, 2), ["s"]), [request])
    assert isinstance(parts["O"], np.ndarray)  # computed on the host: numpy, no device copy
    assert parts["S"].tolist() == [b"s"]


def test_torch_array_describes_its_tensor() -> None:
    value = TorchArray(torch.zeros(2, 3, dtype=torch.bfloat16))
    assert value.shape == (2, 3) and value.ndim == 2
    assert value.dtype == np.uint16 and value.nbytes == 12 and value.device == "cpu"
    reshaped = value.reshape([3, 2])
    assert (
        isinstance(reshaped, TorchArray) and reshaped.tensor.data_ptr() == value.tensor.data_ptr()
    )
    assert value.host().dtype == np.uint16 and value.host().shape == (2, 3)
