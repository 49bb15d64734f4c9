"""Tensor data that lives on an accelerator, carried through the core by reference.

Wire requests are decoded into numpy arrays. An in-process caller may hand over tensors that
already sit on a device (a CUDA torch tensor); copying them to the host only for the backend to
copy them back would cost two transfers per request. The core and the schedulers never read the
elements of a tensor, only its shape and datatype, so they carry device data as a
``DeviceArray``; a backend that knows the framework (``ptserve.backends.pytorch``) subclasses it
and uses the tensor in place. The few places that must read elements (classification, carried
sequence state) call ``to_host``. This module stays free of any framework import.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np


class DeviceArray(abc.ABC):
    """An array on a device: what the core reads of it (shape, dtype, reshape) and a way home."""

    __slots__ = ()

    @property
    @abc.abstractmethod
    def shape(self) -> tuple[int, ...]:
        """The dimensions, as for a numpy array."""

    @property
    @abc.abstractmethod
    def dtype(self) -> np.dtype[Any]:
        """The numpy storage dtype of its datatype (``uint16`` for BF16)."""

    @property
    @abc.abstractmethod
    def device(self) -> str:
        """Where the data lives, e.g. ``cuda:0``."""

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * self.dtype.itemsize

    @abc.abstractmethod
    def reshape(self, shape: list[int] | tuple[int, ...]) -> DeviceArray:
        """The same data in another shape, on the same device (a view where the layout allows)."""

    @abc.abstractmethod
    def host(self) -> np.ndarray:
        """A copy of the data in host memory, in its numpy storage dtype."""


Data = np.ndarray | DeviceArray
"""A tensor's data: a numpy array (always, for the wire), or data on a device (in-process)."""


def to_host(data: Data) -> np.ndarray:
    """The data as a numpy array: itself on the host, a copy from a device."""
    return data if isinstance(data, np.ndarray) else data.host()
