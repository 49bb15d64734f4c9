"""Checking a request against its model, and building the response from the model's outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ptserve.common import datatypes
from ptserve.common.device import Data, to_host
from ptserve.common.errors import invalid_arg
from ptserve.common.iospec import IOSpec, ModelIO
from ptserve.common.prepared import OutputMap, PreparedRequest
from ptserve.common.requests import InferRequest, InferResponse, RequestedOutput, Tensor


def prepare(request: InferRequest, io: ModelIO) -> tuple[PreparedRequest, list[RequestedOutput]]:
    """Validate names, types and shapes; reshape for the model; decide the outputs to return.

    Checked in the reference's order: the requested outputs first, then each input's name, the
    missing inputs, and the inputs' datatypes and shapes in config order.
    """
    model = request.model_name
    requested = _requested_outputs(request, io)
    seen: dict[str, Tensor] = {}
    for tensor in request.inputs:
        if tensor.name in seen:
            raise invalid_arg(f"input '{tensor.name}' appears more than once in the request")
        if io.input(tensor.name) is None:
            raise _unexpected_input(tensor.name, io, model)
        seen[tensor.name] = tensor
    if len(seen) < len(io.inputs):
        missing = [s.name for s in io.inputs if s.name not in seen and not s.optional]
        if missing:
            required = [s for s in io.inputs if not s.optional]
            raise invalid_arg(
                f"expected {len(required)} inputs but got {len(seen)} inputs for model "
                f"'{model}'. Got input(s) {_names_list(list(seen))}, but missing required "
                f"input(s) {_names_list(missing)}. Please provide all required input(s)."
            )

    batching = io.batching
    batch_size = 0
    arrays: dict[str, Data] = {}
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
        shape = tensor.data.shape
        item_shape = shape
        if batching:
            this_batch = _batch_size(spec, shape, io, model)
            if batch_size and this_batch != batch_size:
                raise invalid_arg(
                    f"input '{spec.name}' of model '{model}' has batch size {this_batch}, but "
                    f"other inputs have batch size {batch_size}; all inputs must agree"
                )
            batch_size = this_batch
            item_shape = shape[1:]
        if not spec.allow_ragged_batch and not _shape_matches(item_shape, spec.dims):
            raise invalid_arg(
                f"unexpected shape for input '{spec.name}' for model '{model}'. Expected "
                f"{_shape(spec.full_shape(batching))}, got {_shape(list(shape))}"
            )
        arrays[spec.name] = _reshape_for_model(tensor.data, spec, batching)

    if request.outputs is None:
        outputs = io.output_names
    else:
        wanted = {r.name for r in requested}
        outputs = tuple(name for name in io.output_names if name in wanted)
    prepared = PreparedRequest(
        id=request.id,
        inputs=arrays,
        batch_size=batch_size or 1,  # (a model without inputs runs one row)
        outputs=outputs,
        parameters=request.parameters,
    )
    return prepared, requested


def _unexpected_input(name: str, io: ModelIO, model: str) -> Exception:
    if any(name in b.targets for b in io.batch_inputs):
        return invalid_arg(
            f"unexpected inference input '{name}' for model '{model}': it is a batch input, "
            f"which the server computes for each batch; it expects {_names(io.inputs)}"
        )
    return invalid_arg(
        f"unexpected inference input '{name}' for model '{model}'; it expects {_names(io.inputs)}"
    )


def _batch_size(spec: IOSpec, shape: tuple[int, ...], io: ModelIO, model: str) -> int:
    """The batch dimension of one input of a batching model, within 1..max_batch_size."""
    if not shape:
        raise invalid_arg(
            f"input '{spec.name}' of model '{model}' needs a batch dimension: expected "
            f"shape {_shape(spec.full_shape(True))}, got []"
        )
    size = shape[0]
    if size > io.max_batch_size:
        raise invalid_arg(
            f"inference request batch-size must be <= {io.max_batch_size} for '{model}', got "
            f"{size} for input '{spec.name}'"
        )
    if size < 1:
        raise invalid_arg(
            f"inference request batch-size must be >= 1 for '{model}', got {size} for input "
            f"'{spec.name}'"
        )
    return int(size)


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
            # Classification reads the values: a device output comes to the host here.
            data = classify(to_host(data), wanted.classification, label_list, io.batching)
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


def _reshape_for_model(data: Data, spec: IOSpec, batching: bool) -> Data:
    if spec.reshape is None:
        return data
    target = list(spec.reshape)
    lead = [data.shape[0]] if batching else []
    return data.reshape(lead + _resolve(target, data, len(lead)))


def _reshape_for_client(data: Data, spec: IOSpec, batching: bool) -> Data:
    if spec.reshape is None:
        return data
    lead = [data.shape[0]] if batching and data.ndim else []
    target = list(spec.dims)
    if target.count(-1) > 1:
        return data
    return data.reshape(lead + target)


def _resolve(target: list[int], data: Data, skip: int) -> list[int]:
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
