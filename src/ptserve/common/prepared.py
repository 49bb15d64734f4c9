"""What backends execute and return: requests checked against their model and shaped as it
wants them, and the results of a batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ptserve.common.device import Data
from ptserve.common.errors import ServerError


@dataclass(slots=True)
class PreparedRequest:
    """Inputs keyed by config name, already reshaped; the batch dimension first when batching.
    A ``DeviceArray`` input asks for device outputs back where the model computed them there."""

    id: str
    inputs: dict[str, Data]
    batch_size: int  # 1 for models without batching
    outputs: tuple[str, ...]  # the outputs to return, in config order
    parameters: dict[str, Any] = field(default_factory=dict)


OutputMap = dict[str, Data]  # numpy, or DeviceArray only for requests with device inputs


@dataclass(slots=True)
class ExecutionTimes:
    """How long the parts of one execution took, in nanoseconds."""

    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0


@dataclass(slots=True)
class BatchResult:
    """One result per request of the batch, in order: the outputs, or the error for that request."""

    results: list[OutputMap | ServerError]
    times: ExecutionTimes
