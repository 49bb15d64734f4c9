"""Comparing decoded tensors in the decoders' property tests, HTTP and gRPC alike."""

from __future__ import annotations

import numpy as np


def comparable(data: np.ndarray) -> object:
    """A tensor's elements in a form that compares: its raw bytes (NaN payloads included), or
    for BYTES its Python objects as one flat list (flat: a shape such as [2147483648, 0] holds
    no element but has 2**31 empty rows, which ``tolist()`` would build)."""
    return data.reshape(-1).tolist() if data.dtype == object else data.tobytes()
