"""What both frontends read from an infer request the same way: shared-memory placements,
requested outputs, and the rule for request forms.

A *form* is a decoded request but for its id and its tensor bytes. Clients send one form again
and again with new data, so each frontend keeps the forms it decoded, keyed by what it can
compare cheaply (HTTP: the JSON header's exact bytes; gRPC: the message's description), and cuts
a later request of a known form out of its data without decoding its description again. The
rule of which decoded requests may stand for later ones is this module's ``form_of``, the same
for both: every input's data came as raw bytes inside the request (JSON or typed values are
decoded every time) and no input or output is placed in shared memory (what a region holds and
whether it is registered change between requests). A form only saves decoding: the core checks
every request against its model whatever the frontend kept.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ptserve.common.datatypes import DataType
from ptserve.common.errors import invalid_arg
from ptserve.common.memo import Memo
from ptserve.common.requests import InferRequest, Placement, RequestedOutput, Tensor
from ptserve.frontends import tensors

REGION_PARAM = "shared_memory_region"
SIZE_PARAM = "shared_memory_byte_size"
OFFSET_PARAM = "shared_memory_offset"


def placement(where: str, params: Mapping[str, Any]) -> Placement | None:
    """The shared-memory placement a tensor's parameters ask for, or None when they ask none."""
    if REGION_PARAM not in params:
        return None
    region = params[REGION_PARAM]
    if not isinstance(region, str) or not region:
        raise invalid_arg(f"{where}: {REGION_PARAM} must be a non-empty string")
    size = params.get(SIZE_PARAM)
    if size is None:
        raise invalid_arg(f"{where}: {REGION_PARAM} needs {SIZE_PARAM} as well")
    offset = params.get(OFFSET_PARAM, 0)
    for label, value in ((SIZE_PARAM, size), (OFFSET_PARAM, offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise invalid_arg(f"{where}: {label} must be a non-negative integer, got {value!r}")
    return Placement(region, size, offset)


def requested_output(name: Any, params: dict[str, Any], position: int) -> RequestedOutput:
    """An output as both protocols ask for it: a name, ``classification`` (an integer; the core
    checks its value against the model), ``binary_data`` (true or false) and a shared-memory
    placement, read once here so that a bad one fails before the model runs."""
    if not isinstance(name, str) or not name:
        raise invalid_arg(f"outputs[{position}] must have a non-empty string 'name'")
    classification = params.get("classification", 0)
    if isinstance(classification, bool) or not isinstance(classification, int):
        raise invalid_arg(f"output '{name}': classification must be an integer")
    binary = params.get("binary_data")
    if binary is not None and not isinstance(binary, bool):
        raise invalid_arg(f"output '{name}': binary_data must be true or false")
    return RequestedOutput(name, classification, params, placement(f"output '{name}'", params))


@dataclass(frozen=True, slots=True)
class InputForm:
    """One input of a form: what its raw bytes are."""

    name: str
    datatype: DataType
    shape: tuple[int, ...]
    byte_size: int


@dataclass(frozen=True, slots=True)
class RequestForm:
    """A decoded request but for its tensor bytes (and its id, where the key leaves it out)."""

    model: str
    version: str
    id: str
    inputs: tuple[InputForm, ...]
    outputs: tuple[RequestedOutput, ...] | None  # None: every output
    parameters: Mapping[str, Any]

    @property
    def byte_size(self) -> int:
        return sum(form.byte_size for form in self.inputs)

    def request(
        self, payloads: Sequence[bytes | bytearray | memoryview], request_id: str | None = None
    ) -> InferRequest:
        """A request of this form with new data: one payload per input, in order."""
        model = self.model
        return InferRequest(
            model_name=model,
            model_version=self.version,
            id=self.id if request_id is None else request_id,
            inputs=[
                Tensor(
                    i.name, i.datatype, tensors.from_raw(i.name, raw, i.datatype, i.shape, model)
                )
                for i, raw in zip(self.inputs, payloads, strict=True)
            ],
            outputs=None if self.outputs is None else list(self.outputs),
            parameters=dict(self.parameters),
        )


def form_of(request: InferRequest, raw_sizes: Sequence[int | None]) -> RequestForm | None:
    """The form of a decoded request when it may stand for later ones (see the module), else
    None. ``raw_sizes[i]``: how many raw bytes of the request input ``i`` was read from, None
    when it came from anywhere else (JSON or typed values, shared memory)."""
    if any(size is None for size in raw_sizes):
        return None
    outputs = request.outputs
    if outputs is not None and any(output.placement is not None for output in outputs):
        return None
    return RequestForm(
        request.model_name,
        request.model_version,
        request.id,
        tuple(
            InputForm(tensor.name, tensor.datatype, tensor.shape, size or 0)
            for tensor, size in zip(request.inputs, raw_sizes, strict=True)
        ),
        None if outputs is None else tuple(outputs),
        dict(request.parameters),
    )


FormCache = Memo[Hashable, RequestForm]  # one per frontend, keyed as that frontend can
