"""What a sequence model takes beyond its config inputs: control inputs and implicit state.

Read once at load from ``sequence_batching``; the sequence batcher fills these tensors into each
request, and ``iospec`` declares them to the backend as extra inputs and outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ptserve.common.datatypes import DataType

START = "START"
END = "END"
READY = "READY"
CORRID = "CORRID"


@dataclass(frozen=True, slots=True)
class Control:
    """One control tensor (shape [1] per request): a flag's false/true values, or the id."""

    kind: str
    name: str
    datatype: DataType
    values: tuple[Any, Any] = (0, 1)  # (false, true); unused for CORRID

    def flag(self, on: bool) -> np.ndarray:
        return np.array([self.values[1] if on else self.values[0]], dtype=self.datatype.numpy)

    def correlation(self, sequence_id: int | str) -> np.ndarray:
        if self.datatype.is_bytes:
            return np.array([str(sequence_id).encode()], dtype=object)
        if isinstance(sequence_id, str):
            raise ValueError(
                f"string correlation ID '{sequence_id}' cannot fill the "
                f"{self.datatype.config_name} control '{self.name}'"
            )
        return np.array([sequence_id], dtype=self.datatype.numpy)


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One implicit state: fed as ``input_name``, read back from ``output_name``."""

    input_name: str
    output_name: str
    datatype: DataType
    dims: tuple[int, ...]
    initial: np.ndarray  # the value at a sequence start, without the batch dimension


@dataclass(frozen=True, slots=True)
class SequenceIO:
    controls: tuple[Control, ...]
    states: tuple[StateSpec, ...]
