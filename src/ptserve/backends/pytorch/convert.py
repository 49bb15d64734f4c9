"""Moving tensor data between the core's forms (numpy, or a ``DeviceArray``) and torch's."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ptserve.common.datatypes import BY_NAME, DataType
from ptserve.common.device import DeviceArray
from ptserve.common.errors import invalid_arg

TORCH_DTYPES: dict[str, torch.dtype] = {
    t.name: getattr(torch, t.torch_name) for t in BY_NAME.values() if t.torch_name
}
DATATYPE_OF_TORCH: dict[torch.dtype, DataType] = {
    TORCH_DTYPES[name]: BY_NAME[name] for name in TORCH_DTYPES
}


def to_torch(array: np.ndarray, datatype: DataType) -> torch.Tensor:
    """A tensor that shares the array's memory when it can (a copy only for read-only buffers)."""
    flags = array.flags
    if not (flags.writeable and flags.c_contiguous):
        array = np.ascontiguousarray(array).copy()
    if datatype.name == "BF16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's data on the CPU as numpy (BF16 as its uint16 bit pattern)."""
    if not tensor.is_cpu:
        tensor = tensor.cpu()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


class TorchArray(DeviceArray):
    """A torch tensor on a device, as the core carries it: the backend takes ``tensor`` itself."""

    __slots__ = ("ready", "tensor")

    def __init__(self, tensor: torch.Tensor, ready: torch.cuda.Event | None = None) -> None:
        self.tensor = tensor
        self.ready = ready  # recorded on the caller's stream after it produced ``tensor``

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.tensor.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return DATATYPE_OF_TORCH[self.tensor.dtype].numpy

    @property
    def device(self) -> str:
        return str(self.tensor.device)

    def reshape(self, shape: list[int] | tuple[int, ...]) -> TorchArray:
        return TorchArray(self.tensor.reshape(tuple(shape)), self.ready)

    def host(self) -> np.ndarray:
        return to_numpy(self.tensor.detach())

    def __repr__(self) -> str:
        return f"TorchArray(shape={list(self.shape)}, dtype={self.tensor.dtype}, {self.device})"


def as_tensor(data: np.ndarray | DeviceArray, datatype: DataType) -> torch.Tensor:
    """The data as a tensor where it already lives: a ``TorchArray``'s own tensor, or numpy
    memory shared by ``to_torch``."""
    if isinstance(data, TorchArray):
        return data.tensor
    if isinstance(data, DeviceArray):  # another framework's device data: through the host
        return to_torch(data.host(), datatype)
    return to_torch(data, datatype)


def to_strings(array: np.ndarray, where: str) -> list[str]:
    """BYTES elements as the ``List[str]`` TorchScript wants; each must be UTF-8."""
    result: list[str] = []
    for index, item in enumerate(array.flat):
        try:
            result.append(item.decode("utf-8") if isinstance(item, bytes) else str(item))
        except UnicodeDecodeError as exc:
            raise invalid_arg(
                f"{where}: element {index} is not valid UTF-8 ({exc.reason} at byte "
                f"{exc.start}); string inputs must be UTF-8 text"
            ) from None
    return result


def from_strings(items: list[str]) -> np.ndarray:
    """A ``List[str]`` result as a BYTES array."""
    array = np.empty(len(items), dtype=object)
    for index, item in enumerate(items):
        array[index] = item.encode("utf-8")
    return array
