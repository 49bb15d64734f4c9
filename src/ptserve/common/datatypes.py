"""The single table of tensor types: v2 name, config enum, numpy storage dtype, torch dtype.

BYTES tensors are numpy arrays of ``object`` holding ``bytes``. BF16 has no numpy dtype, so its
storage is ``uint16`` (the raw bit pattern); the backend reinterprets it as ``torch.bfloat16``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ptserve.common.errors import invalid_arg


@dataclass(frozen=True, slots=True)
class DataType:
    """Everything known about one tensor type."""

    name: str  # the v2 protocol name, e.g. "FP32"
    config_name: str  # the ModelConfig enum name, e.g. "TYPE_FP32"
    numpy: np.dtype[np.generic]  # how its elements are stored (object for BYTES)
    torch_name: str  # attribute of the torch module, "" for BYTES
    itemsize: int  # bytes per element on the wire, 0 for BYTES (variable)
    json_kind: str  # which JSON values are accepted: "bool", "int", "uint", "float", "bytes", ""
    wire: np.dtype[np.generic]  # ``numpy`` in the wire's byte order (little-endian)

    @property
    def is_bytes(self) -> bool:
        return self.name == "BYTES"


def _dt(name: str, config: str, np_dtype: str, torch_name: str, size: int, kind: str) -> DataType:
    storage = np.dtype(np_dtype)
    return DataType(name, config, storage, torch_name, size, kind, storage.newbyteorder("<"))


_TYPES = (
    _dt("BOOL", "TYPE_BOOL", "bool", "bool", 1, "bool"),
    _dt("UINT8", "TYPE_UINT8", "uint8", "uint8", 1, "uint"),
    _dt("UINT16", "TYPE_UINT16", "uint16", "uint16", 2, "uint"),
    _dt("UINT32", "TYPE_UINT32", "uint32", "uint32", 4, "uint"),
    _dt("UINT64", "TYPE_UINT64", "uint64", "uint64", 8, "uint"),
    _dt("INT8", "TYPE_INT8", "int8", "int8", 1, "int"),
    _dt("INT16", "TYPE_INT16", "int16", "int16", 2, "int"),
    _dt("INT32", "TYPE_INT32", "int32", "int32", 4, "int"),
    _dt("INT64", "TYPE_INT64", "int64", "int64", 8, "int"),
    _dt("FP16", "TYPE_FP16", "float16", "float16", 2, ""),
    _dt("FP32", "TYPE_FP32", "float32", "float32", 4, "float"),
    _dt("FP64", "TYPE_FP64", "float64", "float64", 8, "float"),
    _dt("BF16", "TYPE_BF16", "uint16", "bfloat16", 2, ""),
    _dt("BYTES", "TYPE_STRING", "object", "", 0, "bytes"),
)

BY_NAME: dict[str, DataType] = {t.name: t for t in _TYPES}
BY_CONFIG_NAME: dict[str, DataType] = {t.config_name: t for t in _TYPES}
BYTES = BY_NAME["BYTES"]


def from_name(name: object) -> DataType:
    """The type called ``name`` in the v2 protocol; a clear error for anything else (a JSON
    request may give any value: typed ``object`` so that compiled callers pass it unchecked)."""
    try:
        return BY_NAME[name]  # type: ignore[index]
    except (KeyError, TypeError):
        raise invalid_arg(
            f"invalid datatype '{name}': expected one of {', '.join(BY_NAME)}"
        ) from None


def from_config_name(name: str) -> DataType:
    """The type of a ModelConfig ``data_type`` enum name."""
    try:
        return BY_CONFIG_NAME[name]
    except KeyError:
        raise invalid_arg(f"unsupported data type '{name}'") from None


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


_LENGTH = struct.Struct("<I")


def serialize_bytes(array: np.ndarray) -> bytes:
    """BYTES elements as the wire wants them: each a 4-byte little-endian length, then the bytes."""
    parts: list[bytes] = []
    pack = _LENGTH.pack
    for item in array.flat:
        data = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes(buffer: bytes | bytearray | memoryview, count: int, where: str) -> np.ndarray:
    """Split a length-prefixed BYTES buffer into ``count`` elements; the prefixes must add up."""
    view = memoryview(buffer)
    total = len(view)
    result = np.empty(count, dtype=object)
    offset = 0
    unpack = _LENGTH.unpack_from
    for index in range(count):
        if offset + 4 > total:
            raise invalid_arg(
                f"{where}: BYTES element {index} of {count} is missing "
                f"(the buffer ends after {total} bytes)"
            )
        (length,) = unpack(view, offset)
        offset += 4
        if offset + length > total:
            raise invalid_arg(
                f"{where}: BYTES element {index} claims {length} bytes but only "
                f"{total - offset} remain in the buffer"
            )
        result[index] = bytes(view[offset : offset + length])
        offset += length
    if offset != total:
        raise invalid_arg(
            f"{where}: {total - offset} unexpected bytes after the {count} BYTES elements"
        )
    return result


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """BF16 bit patterns (uint16) as float32 values."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to nearest-even BF16, as uint16 bit patterns."""
    as_int = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((as_int >> 16) & 1) + 0x7FFF
    return ((as_int + rounding) >> 16).astype(np.uint16)
