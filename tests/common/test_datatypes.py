"""The datatype table and the BYTES wire format."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ptserve.common import datatypes
from ptserve.common.errors import ServerError


def test_table_is_consistent() -> None:
    for dt in datatypes.BY_NAME.values():
        assert datatypes.BY_CONFIG_NAME[dt.config_name] is dt
        if not dt.is_bytes:
            assert dt.numpy.itemsize == dt.itemsize


def test_unknown_datatype_message() -> None:
    with pytest.raises(ServerError, match="invalid datatype 'FLOAT'"):
        datatypes.from_name("FLOAT")


def test_bytes_roundtrip() -> None:
    items = np.array([b"", b"abc", "ü".encode(), b"\x00\xff"], dtype=object)
    wire = datatypes.serialize_bytes(items)
    assert wire[:4] == struct.pack("<I", 0)
    back = datatypes.deserialize_bytes(wire, 4, "x")
    assert list(back) == list(items)


@pytest.mark.parametrize(
    ("wire", "count", "message"),
    [
        (struct.pack("<I", 10) + b"abc", 1, "claims 10 bytes but only 3 remain"),
        (struct.pack("<I", 1) + b"a", 2, "BYTES element 1 of 2 is missing"),
        (struct.pack("<I", 1) + b"ab", 1, "1 unexpected bytes after the 1 BYTES elements"),
        (b"\x01\x00", 1, "BYTES element 0 of 1 is missing"),
    ],
)
def test_bytes_lies_are_caught(wire: bytes, count: int, message: str) -> None:
    with pytest.raises(ServerError, match=message):
        datatypes.deserialize_bytes(wire, count, "input 'x'")


def test_bf16_conversion() -> None:
    values = np.array([1.0, -2.5, 3.140625, 0.0], dtype=np.float32)
    bits = datatypes.float32_to_bf16(values)
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal(datatypes.bf16_to_float32(bits), values)
