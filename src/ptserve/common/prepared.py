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

    def __init__(
        self,
        id: str,
        inputs: dict[str, Data],
        batch_size: int,
        outputs: tuple[str, ...],
        parameters: dict[str, Any] | None = None,
    ) -> None:
        self.id = id
        self.inputs = inputs
        self.batch_size = batch_size
        self.outputs = outputs
        self.parameters = {} if parameters is None else parameters


OutputMap = dict[str, Data]  # numpy, or DeviceArray only for requests with device inputs


@dataclass(slots=True)
class ExecutionTimes:
    """How long the parts of one execution took, in nanoseconds."""

    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0

    def __init__(
        self, compute_input_ns: int = 0, compute_infer_ns: int = 0, compute_output_ns: int = 0
    ) -> None:
        self.compute_input_ns = compute_input_ns
        self.compute_infer_ns = compute_infer_ns
        self.compute_output_ns = compute_output_ns


@dataclass(slots=True)
class BatchResult:
    """One result per request of the batch, in order: the outputs, or the error for that request."""

    results: list[OutputMap | ServerError]
    times: ExecutionTimes

    def __init__(self, results: list[OutputMap | ServerError], times: ExecutionTimes) -> None:
        self.results = results
        self.times = times
