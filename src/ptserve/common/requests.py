"""Transport-agnostic inference requests and responses, as the frontends hand them to the core."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ptserve.common.datatypes import DataType


@dataclass(slots=True)
class Tensor:
    """One named tensor. ``data`` has the storage dtype of ``datatype`` and the tensor's shape."""

    name: str
    datatype: DataType
    data: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for, with the parameters the core acts on.

    Transport-only parameters (``binary_data``, shared-memory placement) stay in ``parameters``
    for the frontend that set them.
    """

    name: str
    classification: int = 0
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class InferRequest:
    """A request after decoding, before validation against the model."""

    model_name: str
    model_version: str = ""
    id: str = ""
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[RequestedOutput] | None = None  # None: every output
    parameters: dict[str, Any] = field(default_factory=dict)
    # Set by a frontend when every request with this signature has the same names, types,
    # shapes, outputs and parameters (only the tensor data differs): the core then checks the
    # first one against the model and reuses the outcome.
    signature: Hashable | None = None


@dataclass(slots=True)
class InferResponse:
    """The result of one request."""

    model_name: str
    model_version: str
    id: str
    outputs: list[Tensor]
    requested: dict[str, RequestedOutput] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)
