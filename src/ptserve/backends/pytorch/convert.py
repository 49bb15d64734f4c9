"""Moving tensor data between numpy (the core's form) and torch (the model's form)."""

from __future__ import annotations

import numpy as np
import torch

from ptserve.common.datatypes import BY_NAME, DataType
from ptserve.common.errors import invalid_arg

TORCH_DTYPES: dict[str, torch.dtype] = {
    t.name: getattr(torch, t.torch_name) for t in BY_NAME.values() if t.torch_name
}
DATATYPE_OF_TORCH: dict[torch.dtype, DataType] = {
    TORCH_DTYPES[name]: BY_NAME[name] for name in TORCH_DTYPES
}


def to_torch(array: np.ndarray, datatype: DataType) -> torch.Tensor:
    """A tensor that shares the array's memory when it can (a copy only for read-only buffers)."""
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.ascontiguousarray(array).copy()
    if datatype.name == "BF16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's data on the CPU as numpy (BF16 as its uint16 bit pattern)."""
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


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
