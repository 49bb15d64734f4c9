"""Checking a request against its model, and building the response from the model's outputs."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptserve.common import datatypes
from ptserve.common.errors import invalid_arg
from ptserve.common.iospec import IOSpec, ModelIO
from ptserve.common.memo import Memo
from ptserve.common.prepared import OutputMap, PreparedRequest
from ptserve.common.requests import InferRequest, InferResponse, RequestedOutput, Tensor


@dataclass(slots=True, frozen=True)
class PreparePlan:
    """What checking one request against the model decided, reused for every later request
    of the same signature (the same names, types, shapes and outputs; other tensor data)."""

    placements: tuple[tuple[int, IOSpec], ...]  # (position in request.inputs, spec), config order
    batch_size: int
    outputs: tuple[str, ...]
    requested: list[RequestedOutput]

    def apply(
        self, request: InferRequest, batching: bool
    ) -> tuple[PreparedRequest, list[RequestedOutput]]:
        inputs = request.inputs
        arrays = {
            spec.name: _reshape_for_model(inputs[position].data, spec, batching)
            for position, spec in self.placements
        }
        prepared = PreparedRequest(
            id=request.id,
            inputs=arrays,
            batch_size=self.batch_size,
            outputs=self.outputs,
            parameters=request.parameters,
        )
        return prepared, self.requested


PlanCache = Memo[Hashable, PreparePlan]  # one per model version: a reload starts afresh


def prepare(
    request: InferRequest, io: ModelIO, plans: PlanCache | None = None
) -> tuple[PreparedRequest, list[RequestedOutput]]:
    """Validate names, types and shapes; reshape for the model; decide the outputs to return.

    With ``plans``, a request whose signature was checked before skips the checks.
    """
    signature = request.signature
    if signature is not None and plans is not None and (plan := plans.get(signature)) is not None:
        return plan.apply(request, io.batching)
    model = request.model_name
    requested = _requested_outputs(request, io)  # first, as the reference: it names the output
    seen: dict[str, Tensor] = {}
    positions: dict[str, int] = {}
    for position, tensor in enumerate(request.inputs):
        if tensor.name in seen:
            raise invalid_arg(f"input '{tensor.name}' appears more than once in the request")
        if io.input(tensor.name) is None:
            if any(tensor.name in b.targets for b in io.batch_inputs):
                raise invalid_arg(
                    f"unexpected inference input '{tensor.name}' for model '{model}': it is a "
                    "batch input, which the server computes for each batch; it expects "
                    f"{_names(io.inputs)}"
                )
            raise invalid_arg(
                f"unexpected inference input '{tensor.name}' for model '{model}'; "
                f"it expects {_names(io.inputs)}"
            )
        seen[tensor.name] = tensor
        positions[tensor.name] = position
    missing = [s.name for s in io.inputs if s.name not in seen and not s.optional]
    if missing:
        required = [s for s in io.inputs if not s.optional]
        raise invalid_arg(
            f"expected {len(required)} inputs but got {len(seen)} inputs for model '{model}'. "
            f"Got input(s) {_names_list(list(seen))}, but missing required input(s) "
            f"{_names_list(missing)}. Please provide all required input(s)."
        )

    batch_size = 0
    arrays: dict[str, np.ndarray] = {}
    for spec in io.inputs:
        found = seen.get(spec.name)
        if found is None:
            continue
        tensor = found
        if tensor.datatype is not spec.datatype:
            raise invalid_arg(
                f"inference input '{spec.name}' data-type is '{tensor.datatype.name}', but model "
                f"'{model}' expects '{spec.datatype.name}'"
            )
        shape = tensor.shape
        if io.batching:
            if not shape:
                raise invalid_arg(
                    f"input '{spec.name}' of model '{model}' needs a batch dimension: expected "
                    f"shape {_shape(spec.full_shape(True))}, got []"
                )
            this_batch = shape[0]
            if this_batch < 1 or this_batch > io.max_batch_size:
                raise invalid_arg(
                    f"inference request batch-size must be <= {io.max_batch_size} for "
                    f"'{model}', got {this_batch} for input '{spec.name}'"
                    if this_batch > io.max_batch_size
                    else f"inference request batch-size must be >= 1 for '{model}', got "
                    f"{this_batch} for input '{spec.name}'"
                )
            if batch_size and this_batch != batch_size:
                raise invalid_arg(
                    f"input '{spec.name}' of model '{model}' has batch size {this_batch}, but "
                    f"other inputs have batch size {batch_size}; all inputs must agree"
                )
            batch_size = this_batch
            item_shape = shape[1:]
        else:
            item_shape = shape
        if not spec.allow_ragged_batch and not _shape_matches(item_shape, spec.dims):
            raise invalid_arg(
                f"unexpected shape for input '{spec.name}' for model '{model}'. Expected "
                f"{_shape(spec.full_shape(io.batching))}, got {_shape(list(shape))}"
            )
        arrays[spec.name] = _reshape_for_model(tensor.data, spec, io.batching)

    prepared = PreparedRequest(
        id=request.id,
        inputs=arrays,
        batch_size=batch_size if io.batching else 1,
        outputs=tuple(o.name for o in io.outputs if o.name in {r.name for r in requested}),
        parameters=request.parameters,
    )
    if signature is not None and plans is not None:
        placements = tuple((positions[s.name], s) for s in io.inputs if s.name in arrays)
        plans.put(
            signature, PreparePlan(placements, prepared.batch_size, prepared.outputs, requested)
        )
    return prepared, requested


def build_response(
    request: InferRequest,
    version: str,
    io: ModelIO,
    requested: list[RequestedOutput],
    outputs: OutputMap,
    labels: dict[str, list[str]] | None = None,
) -> InferResponse:
    """The response tensors in the order the client asked for them, in the client's shapes."""
    tensors: list[Tensor] = []
    for wanted in requested:
        spec = io.output(wanted.name)
        assert spec is not None
        data = _reshape_for_client(outputs[wanted.name], spec, io.batching)
        if wanted.classification > 0:
            label_list = (labels or {}).get(wanted.name, [])
            data = classify(data, wanted.classification, label_list, io.batching)
            tensors.append(Tensor(wanted.name, datatypes.BYTES, data))
        else:
            tensors.append(Tensor(wanted.name, spec.datatype, data))
    return InferResponse(
        model_name=request.model_name,
        model_version=version,
        id=request.id,
        outputs=tensors,
        requested={r.name: r for r in requested},
    )


def classify(data: np.ndarray, k: int, labels: list[str], batching: bool) -> np.ndarray:
    """The classification extension: the top ``k`` as ``"<value>:<index>[:<label>]"`` strings."""
    if data.dtype == object:
        raise invalid_arg("classification is not supported for BYTES outputs")
    rows = data.reshape(data.shape[0], -1) if batching else data.reshape(1, -1)
    k = min(k, rows.shape[1])
    result = np.empty((rows.shape[0], k), dtype=object)
    for r, row in enumerate(rows):
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for c, index in enumerate(order):
            value = row[index]
            text = f"{float(value):f}" if row.dtype.kind == "f" else str(value)
            label = f":{labels[index]}" if index < len(labels) else ""
            result[r, c] = f"{text}:{index}{label}".encode()
    return result if batching else result.reshape(k)


def load_labels(model_dir: Path, io: ModelIO) -> dict[str, list[str]]:
    """Labels of the outputs that name a ``label_filename``, read once at load."""
    labels: dict[str, list[str]] = {}
    for spec in io.outputs:
        if spec.label_filename:
            path = model_dir / spec.label_filename
            try:
                labels[spec.name] = path.read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise invalid_arg(
                    f"output '{spec.name}': cannot read label_filename '{path}': {exc}"
                ) from None
    return labels


def _requested_outputs(request: InferRequest, io: ModelIO) -> list[RequestedOutput]:
    if request.outputs is None:
        return [RequestedOutput(spec.name) for spec in io.outputs]
    names: set[str] = set()
    for wanted in request.outputs:
        if io.output(wanted.name) is None:
            raise invalid_arg(
                f"unexpected inference output '{wanted.name}' for model '{request.model_name}'; "
                f"it has outputs {_names(io.outputs)}"
            )
        if wanted.name in names:
            raise invalid_arg(f"output '{wanted.name}' is requested more than once")
        names.add(wanted.name)
        if wanted.classification < 0:
            raise invalid_arg(
                f"output '{wanted.name}': classification must be a positive count, got "
                f"{wanted.classification}"
            )
    return list(request.outputs)


def _shape_matches(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    if len(shape) != len(dims):
        return False
    return all(d == -1 or d == s for s, d in zip(shape, dims, strict=True))


def _reshape_for_model(data: np.ndarray, spec: IOSpec, batching: bool) -> np.ndarray:
    if spec.reshape is None:
        return data
    target = list(spec.reshape)
    lead = [data.shape[0]] if batching else []
    return data.reshape(lead + _resolve(target, data, len(lead)))


def _reshape_for_client(data: np.ndarray, spec: IOSpec, batching: bool) -> np.ndarray:
    if spec.reshape is None:
        return data
    lead = [data.shape[0]] if batching and data.ndim else []
    target = list(spec.dims)
    if target.count(-1) > 1:
        return data
    return data.reshape(lead + target)


def _resolve(target: list[int], data: np.ndarray, skip: int) -> list[int]:
    """Fill the variable dims of a reshape from the request's variable dims, in order."""
    if -1 not in target:
        return target
    if target.count(-1) == 1:
        return target
    variable = [d for d in data.shape[skip:]]
    values = iter(variable)
    return [next(values, -1) if d == -1 else d for d in target]


def _shape(shape: list[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _names(specs: tuple[IOSpec, ...]) -> str:
    return _names_list([s.name for s in specs])


def _names_list(names: list[str]) -> str:
    return "[" + ", ".join(f"'{n}'" for n in names) + "]"
