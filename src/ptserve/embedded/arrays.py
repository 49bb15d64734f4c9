"""The caller's arrays ↔ the core's tensors: numpy arrays and torch tensors in, the same kind
back, sharing memory wherever the dtype and device already fit.

A numpy array or CPU torch tensor enters as a numpy view of its memory, and the backend's
``torch.from_numpy`` turns it back into a tensor on the same memory: the model reads the
caller's buffer. A tensor on another device (CUDA) enters as a ``TorchArray``, the core's
reference to device data (see docs/architecture.md): the core checks only its shape and
datatype, and the backend hands the caller's tensor itself to an instance on that device (or
moves it once, straight to the instance's device). Outputs that the instance computed on a
device come back as views of its result there and are moved, device to device, to the caller's
device when it differs; the rest (CPU instances, BYTES, classification) comes back through the
host. Any torch input makes every non-BYTES output a torch tensor on the first torch input's
device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ptserve.backends.pytorch.convert import DATATYPE_OF_TORCH, TorchArray, to_numpy, to_torch
from ptserve.common.datatypes import BY_NAME, BYTES, DataType
from ptserve.common.device import to_host
from ptserve.common.errors import invalid_arg
from ptserve.common.requests import InferResponse, Tensor

# numpy storage dtype → datatype; uint16 is UINT16 (BF16 comes only from torch.bfloat16).
_BY_NUMPY: dict[np.dtype[Any], DataType] = {
    t.numpy: t for t in BY_NAME.values() if t.name != "BF16"
}

Array = np.ndarray | torch.Tensor


def to_tensor(name: str, value: object) -> Tensor:
    """One input as the core's ``Tensor``; ServerError (INVALID_ARGUMENT) for what no datatype
    stores. Whether the datatype and shape fit the model is the core's check, as for the wire."""
    if isinstance(value, TorchArray):  # a device tensor already captured by ``capture``
        return Tensor(name, _datatype(name, value.tensor), value)
    if isinstance(value, torch.Tensor):
        datatype = _datatype(name, value)
        value = value.detach()
        if value.device.type == "cpu":
            return Tensor(name, datatype, to_numpy(value))
        return Tensor(name, datatype, TorchArray(value, _ready(value)))
    if isinstance(value, np.ndarray):
        return _from_numpy(name, value)
    raise invalid_arg(
        f"input '{name}' must be a numpy array or a torch tensor, got {type(value).__name__}"
    )


def _datatype(name: str, value: torch.Tensor) -> DataType:
    datatype = DATATYPE_OF_TORCH.get(value.dtype)
    if datatype is None:
        raise invalid_arg(
            f"input '{name}' has torch dtype {value.dtype}, which no v2 datatype stores"
        )
    return datatype


def _from_numpy(name: str, array: np.ndarray) -> Tensor:
    if array.dtype.kind in "US":  # text: BYTES elements are bytes, str encoded as UTF-8
        encoded = np.empty(array.shape, dtype=object)
        for index, item in np.ndenumerate(array):
            encoded[index] = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        return Tensor(name, BYTES, encoded)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    datatype = _BY_NUMPY.get(array.dtype)
    if datatype is None:
        raise invalid_arg(
            f"input '{name}' has numpy dtype {array.dtype}, which no v2 datatype stores; "
            f"expected one of {', '.join(str(d) for d in _BY_NUMPY)}"
        )
    return Tensor(name, datatype, array)


def capture(inputs: Mapping[str, object]) -> dict[str, object]:
    """The inputs with each device tensor taken as a ``TorchArray`` marked ready on the calling
    thread's current CUDA stream: call it on the caller's thread, before handing the request to
    another (the stream is per thread)."""
    return {
        name: TorchArray(value.detach(), _ready(value))
        if isinstance(value, torch.Tensor) and value.device.type != "cpu"
        else value
        for name, value in inputs.items()
    }


def claim(outputs: Mapping[str, Any]) -> None:
    """Tell the CUDA allocator that the calling thread's current stream uses the device outputs,
    so that their memory is not reused before that stream's work on them is done."""
    for value in outputs.values():
        if isinstance(value, torch.Tensor) and value.is_cuda:
            value.record_stream(torch.cuda.current_stream(value.device))


def _ready(tensor: torch.Tensor) -> torch.cuda.Event | None:
    """An event on the caller's current stream, after the work that produces ``tensor``: the
    instance's stream waits for it instead of the caller synchronising."""
    if tensor.device.type != "cuda":
        return None
    event = torch.cuda.Event()  # type: ignore[no-untyped-call]
    event.record(torch.cuda.current_stream(tensor.device))
    return event


def output_device(inputs: Mapping[str, object]) -> torch.device | None:
    """Where outputs go back as torch tensors: the device of the first torch input; None
    (numpy outputs) when every input is a numpy array."""
    for value in inputs.values():
        if isinstance(value, torch.Tensor):
            return value.device
        if isinstance(value, TorchArray):
            return value.tensor.device
    return None


def from_response(response: InferResponse, device: torch.device | None) -> dict[str, Any]:
    """The outputs by name: numpy arrays, or torch tensors on ``device`` (BYTES outputs stay
    numpy arrays of ``bytes``: torch has no string tensors)."""
    if device is None:
        return {tensor.name: to_host(tensor.data) for tensor in response.outputs}
    result: dict[str, Any] = {}
    for tensor in response.outputs:
        data = tensor.data
        if tensor.datatype.is_bytes:
            result[tensor.name] = to_host(data)
        elif isinstance(data, TorchArray):
            # Computed on a device and left there: ready (the instance's stream was waited for).
            value = data.tensor
            result[tensor.name] = value if value.device == device else value.to(device)
        else:
            value = to_torch(to_host(data), tensor.datatype)
            result[tensor.name] = value if device.type == "cpu" else value.to(device)
    return result
