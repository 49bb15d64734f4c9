"""Transport-agnostic inference requests and responses, as the frontends hand them to the core."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ptserve.common.datatypes import DataType
from ptserve.common.device import Data


@dataclass(slots=True)
class Tensor:
    """One named tensor. ``data`` has the storage dtype of ``datatype`` and the tensor's shape:
    a numpy array, or (from the in-process API only) a ``DeviceArray`` left on its device."""

    name: str
    datatype: DataType
    data: Data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a tensor lives in a registered shared-memory region: its window inside it."""

    region: str
    byte_size: int
    offset: int = 0


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for, with what the core acts on (``classification``) and what
    the frontend that decoded it answers with (its ``parameters``, e.g. ``binary_data``, and the
    shared-memory ``placement`` read from them)."""

    name: str
    classification: int = 0
    parameters: dict[str, Any] = field(default_factory=dict)
    placement: Placement | None = None


@dataclass(slots=True)
class InferRequest:
    """A request after decoding, before validation against the model."""

    model_name: str
    model_version: str = ""
    id: str = ""
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[RequestedOutput] | None = None  # None: every output
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class InferResponse:
    """The result of one request."""

    model_name: str
    model_version: str
    id: str
    outputs: list[Tensor]
    requested: dict[str, RequestedOutput] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)
