"""Decoding tensor data that arrives as JSON values or raw bytes; shared by every frontend."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ptserve.common import datatypes
from ptserve.common.datatypes import DataType
from ptserve.common.device import Data
from ptserve.common.errors import invalid_arg

# More elements than any real tensor has; a shape beyond it (even one with a zero dimension)
# would make numpy raise instead of the decoder answering the client.
MAX_ELEMENTS = 2**48

# JSON numbers packed straight into a tensor's bytes (``_packed``), by datatype and count.
_PACKERS: dict[tuple[str, int], struct.Struct] = {}
_MAX_PACKERS = 256  # (datatype, count) pairs kept; a client's varying shapes cannot grow it


def check_shape(name: str, shape: Any) -> tuple[int, ...]:
    """A shape must be a list of non-negative integers that numpy can address."""
    if not isinstance(shape, list | tuple):
        raise invalid_arg(
            f"input '{name}': 'shape' must be a list of integers, got {type(shape).__name__}"
        )
    result: list[int] = []
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise invalid_arg(
                f"input '{name}': 'shape' must be a list of integers, got element {dim!r}"
            )
        if dim < 0:
            raise invalid_arg(f"input '{name}': 'shape' {list(shape)} has a negative dimension")
        result.append(dim)
    if datatypes.element_count([dim for dim in result if dim]) > MAX_ELEMENTS:
        raise invalid_arg(
            f"input '{name}': 'shape' {result} is too large (more than {MAX_ELEMENTS} elements)"
        )
    return tuple(result)


def from_raw(
    name: str,
    raw: bytes | bytearray | memoryview,
    dt: DataType,
    shape: tuple[int, ...],
    model: str = "",
) -> np.ndarray:
    """A tensor from its little-endian, row-major bytes (length-prefixed elements for BYTES).
    ``model`` names the model in the size error, as the reference's does."""
    count = datatypes.element_count(shape)
    if dt.is_bytes:
        if count * 4 > len(raw):  # before allocating: every element has a 4-byte length prefix
            raise invalid_arg(
                f"input '{name}': shape {list(shape)} needs {count} BYTES elements of at least "
                f"4 bytes each, but the data has only {len(raw)} bytes"
            )
        return datatypes.deserialize_bytes(raw, count, f"input '{name}'").reshape(shape)
    expected = count * dt.itemsize
    if len(raw) != expected:
        for_model = f" for model '{model}'" if model else ""
        raise invalid_arg(
            f"input byte size mismatch for input '{name}'{for_model}. Expected {expected}, got "
            f"{len(raw)} (shape {list(shape)} of {dt.name}: {count} elements of {dt.itemsize} "
            "bytes)"
        )
    return np.frombuffer(raw, dtype=dt.wire).reshape(shape)


def from_json(name: str, data: Any, dt: DataType, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor from JSON values (nested or flat); values must fit the datatype."""
    count = datatypes.element_count(shape)
    if dt.is_bytes:
        flat = _flatten(name, data)
        if len(flat) != count:
            raise _count_error(name, len(flat), count, shape)
        array = np.empty(count, dtype=object)
        for index, item in enumerate(flat):
            if isinstance(item, str):
                array[index] = item.encode("utf-8")
            else:
                raise invalid_arg(
                    f"input '{name}': BYTES element {index} must be a JSON string, "
                    f"got {type(item).__name__}"
                )
        return array.reshape(shape)
    if not dt.json_kind:
        raise invalid_arg(
            f"input '{name}': {dt.name} data cannot be sent as JSON; send it as binary data "
            "(parameters.binary_data_size)"
        )
    if not isinstance(data, list):
        data = [data]
    packed = _packed(data, dt, count)
    if packed is not None:
        return packed.reshape(shape)
    try:
        values = np.array(data)
    except (ValueError, OverflowError) as exc:
        raise invalid_arg(
            f"input '{name}': 'data' is not a regular array of numbers: {exc}"
        ) from None
    if values.size != count:
        raise _count_error(name, values.size, count, shape)
    if count == 0:
        return np.zeros(shape, dtype=dt.numpy)
    kind = values.dtype.kind
    if dt.json_kind == "bool":
        if kind != "b":
            raise _type_error(name, dt, values)
    elif dt.json_kind in ("int", "uint"):
        if kind not in "iu":
            # Integers beyond int64 make numpy fall back to float or object: check the values.
            flat = _flatten(name, data)
            if not _all_ints(flat):
                raise _type_error(name, dt, values)
            values = np.array(flat, dtype=object)
        check_integer_range(name, dt, values)
    elif kind not in "iuf":
        raise _type_error(name, dt, values)
    return values.astype(dt.numpy).reshape(shape)


def _packed(data: list[Any], dt: DataType, count: int) -> np.ndarray | None:
    """A flat list of numbers as the tensor, packed by ``struct`` (a third of numpy's time on
    a 3,072-value image: numpy first works out each element's type and the list's shape);
    None where the list does not pack as it stands (nested, a value of another kind or out of
    range, a list of bools), for ``from_json`` to convert or to say what is wrong with it."""
    if dt.json_kind == "bool" or len(data) != count or not count or type(data[0]) is bool:
        return None
    key = (dt.name, count)
    packer = _PACKERS.get(key)
    if packer is None:
        if len(_PACKERS) >= _MAX_PACKERS:
            _PACKERS.clear()
        # numpy's type character names the C type, which struct's native mode ("@") packs
        code = np.dtype(dt.numpy).char
        packer = _PACKERS[key] = struct.Struct(f"@{count}{code}")
    try:
        raw = packer.pack(*data)
    except (struct.error, OverflowError, TypeError):
        return None
    return np.frombuffer(raw, dtype=dt.numpy)


def check_integer_range(name: str, dt: DataType, values: np.ndarray) -> None:
    """Integers must fit the declared type: no silent wrap-around."""
    if not values.size:
        return
    info = np.iinfo(dt.numpy)  # type: ignore[type-var]
    low, high = int(values.min()), int(values.max())
    if low < info.min or high > info.max:
        raise invalid_arg(
            f"input '{name}': value {low if low < info.min else high} is out of range for "
            f"{dt.name} ({info.min} to {info.max})"
        )


def _all_ints(values: list[Any]) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _flatten(name: str, data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    flat: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _count_error(name: str, got: int, expected: int, shape: tuple[int, ...]) -> Exception:
    return invalid_arg(
        f"input '{name}': 'data' has {got} elements, but shape {list(shape)} needs {expected}"
    )


def _type_error(name: str, dt: DataType, values: np.ndarray) -> Exception:
    sample = next(iter(values.flat), None)
    expected = {"bool": "true/false", "int": "integers", "uint": "integers", "float": "numbers"}
    return invalid_arg(
        f"input '{name}': {dt.name} data must be {expected.get(dt.json_kind, 'numbers')}, "
        f"got {sample!r}"
    )


def to_json_values(data: np.ndarray, dt: DataType) -> list[Any]:
    """A tensor as a flat list of JSON values."""
    if dt.is_bytes:
        return [
            item.decode("utf-8", errors="replace") if isinstance(item, bytes) else str(item)
            for item in data.flat
        ]
    if dt.name == "BF16":
        data = datatypes.bf16_to_float32(data)
    values: list[Any] = data.reshape(-1).tolist()
    return values


def to_raw(data: Data, dt: DataType) -> bytes | memoryview:
    """A tensor's wire bytes; a view of its memory when it is contiguous and on the host
    (data on a device is copied home first, as ``to_host`` does)."""
    host = data if isinstance(data, np.ndarray) else data.host()
    if dt.is_bytes:
        return datatypes.serialize_bytes(host)
    array = np.ascontiguousarray(host)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return memoryview(array).cast("B") if array.size else b""  # type: ignore[arg-type]
