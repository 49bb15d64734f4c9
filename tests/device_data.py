"""A stand-in for data on a device, for tests of the layers that carry it without a framework."""

from __future__ import annotations

from typing import Any

import numpy as np

from ptserve.common.device import DeviceArray


class Remote(DeviceArray):
    """Device data that only a test can see into: ``host()`` counts the copies it makes."""

    copies = 0

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.values.dtype

    @property
    def device(self) -> str:
        return "remote:0"

    def reshape(self, shape: list[int] | tuple[int, ...]) -> Remote:
        return Remote(self.values.reshape(shape))

    def host(self) -> np.ndarray:
        Remote.copies += 1
        return self.values.copy()
