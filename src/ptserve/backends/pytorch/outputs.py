"""From what a model returns to one ``OutputMap`` per request: shared by every runtime.

A result may be a Tensor, a ``List[str]``, a tuple or list of those (nested lists of tensors are
flattened in order), or a ``Dict[str, Tensor]`` keyed by output name. Positions follow
``<name>__<index>`` when every output name has that form, else config order. A ``batch_output``
(BATCH_SCATTER_WITH_INPUT_SHAPE) is split by its source input's shape in each request instead.

A request that brought device inputs (``DeviceArray``) gets the slices of a result that the model
left on a device as ``TorchArray`` views, without a copy to the host. Everything else is numpy:
results on the host, requests with host inputs only, ``List[str]``, batch outputs (scattered on
the host) and sequence state outputs (the scheduler keeps state on the host).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ptserve.backends.batch_io import scatter_with_input_shape, source_shapes
from ptserve.backends.pytorch.binding import bind_outputs
from ptserve.backends.pytorch.convert import (
    DATATYPE_OF_TORCH,
    TORCH_DTYPES,
    TorchArray,
    from_strings,
    to_numpy,
)
from ptserve.common.device import Data, DeviceArray
from ptserve.common.errors import internal
from ptserve.common.iospec import IOSpec, ModelIO
from ptserve.common.prepared import OutputMap, PreparedRequest


class OutputPlan:
    """Which result feeds which output, and how a batched result is split back per request."""

    def __init__(self, model: str, io: ModelIO) -> None:
        self.model = model
        self.batching = io.batching
        self.specs = {s.name: s for s in io.model_outputs}
        positions = bind_outputs(model, [o.name for o in io.outputs])
        self.positions = dict(zip((o.name for o in io.outputs), positions, strict=True))
        after = max(positions, default=-1) + 1
        for offset, spec in enumerate(io.extra_outputs):
            self.positions[spec.name] = after + offset
        self.host_only = frozenset(spec.name for spec in io.extra_outputs)  # sequence state
        self.expected = {name: TORCH_DTYPES.get(s.datatype.name) for name, s in self.specs.items()}
        # The numpy dtype a result of the expected type reads as (None for BF16, which numpy
        # lacks, and strings): such a result passes the checks as numpy, without a copy.
        self.host_dtypes = {
            name: None if s.datatype.is_bytes or s.datatype.name == "BF16" else s.datatype.numpy
            for name, s in self.specs.items()
        }
        # Outputs that the core reshapes back to their dims for the client: the model's result
        # must hold as many elements per row, else the reshape would fail without naming them.
        self.reshaped = {
            s.name: s.dims for s in io.outputs if s.reshape is not None and s.dims.count(-1) <= 1
        }
        # Batch outputs: (source input, the shape of one request's part with -1 for the
        # dimensions that source input's shape gives), as the model sees the output.
        self.scattered: dict[str, tuple[str, tuple[int, ...]]] = {}
        for spec in io.outputs:
            batch_output = io.batch_output(spec.name)
            if batch_output is not None:
                dims = spec.model_dims
                template = ((-1,) if io.batching else ()) + tuple(dims)
                self.scattered[spec.name] = (batch_output.source, template)

    def split(self, raw: Any, requests: Sequence[PreparedRequest]) -> list[OutputMap]:
        """The outputs each request asked for; raises ServerError for a result that does not fit."""
        wanted: list[str] = []
        for request in requests:
            for name in request.outputs:
                if name not in wanted:
                    wanted.append(name)
        total = sum(r.batch_size for r in requests)
        per_output = {
            name: self._split_one(self.specs[name], self._pick(raw, name), requests, total)
            for name in wanted
        }
        return [
            {name: per_output[name][i] for name in request.outputs}
            for i, request in enumerate(requests)
        ]

    def _pick(self, raw: Any, name: str) -> Any:
        if isinstance(raw, dict):
            if name not in raw:
                keys = ", ".join(repr(k) for k in raw) or "none"
                raise internal(
                    f"model '{self.model}': the model returned a dictionary without output "
                    f"'{name}' (its keys: {keys}); a Dict result is mapped by output name"
                )
            return raw[name]
        values = flatten(raw)
        index = self.positions[name]
        if index >= len(values):
            raise internal(
                f"model '{self.model}': output '{name}' is result {index} of the model, but "
                f"the model returned {len(values)} result(s)"
            )
        return values[index]

    def _split_one(
        self,
        spec: IOSpec,
        value: Any,
        requests: Sequence[PreparedRequest],
        total: int,
    ) -> list[Data]:
        if _is_strings(value):
            return self._split_strings(spec, value, requests, total)
        name = spec.name
        if not isinstance(value, torch.Tensor):
            raise internal(
                f"model '{self.model}': output '{name}' is a {type(value).__name__}; outputs "
                "must be Tensors or List[str]"
            )
        # A result on the host, of the expected type, becomes numpy once; its checks then read
        # the array (every torch attribute read costs more than numpy's).
        array = self._host_array(name, value)
        if array is None:
            value = self._checked(spec, value)
        if name in self.scattered:
            source, template = self.scattered[name]
            shapes = source_shapes(source, requests, f"batch output '{name}'")
            flat = (to_numpy(value) if array is None else array).reshape(-1)
            return list(scatter_with_input_shape(self.model, name, flat, template, shapes))
        shape = array.shape if array is not None else tuple(int(d) for d in value.shape)
        if self.batching and shape[0] != total:
            raise internal(
                f"model '{self.model}': output '{name}' has batch dimension {shape[0]}, "
                f"but the batch holds {total} request row(s)"
            )
        if name in self.reshaped:
            self._check_reshape(name, shape, total)
        keep = [False] * len(requests)
        if array is None:
            # Only a result left on a device is asked which requests brought device inputs,
            # so a batch of host requests (every wire request) pays nothing for device data.
            if not value.is_cpu and name not in self.host_only:
                keep = [_device_inputs(r) for r in requests]
            # One copy to the host for the whole batch, only when some request wants numpy.
            if not all(keep):
                array = to_numpy(value)
        if not self.batching:
            return [TorchArray(value) if keep[0] or array is None else array]
        parts: list[Data] = []
        offset = 0
        for request, device in zip(requests, keep, strict=True):
            end = offset + request.batch_size
            parts.append(
                TorchArray(value[offset:end]) if device or array is None else array[offset:end]
            )
            offset = end
        return parts

    def _host_array(self, name: str, value: torch.Tensor) -> np.ndarray | None:
        """A host result with at least one dimension, of the expected type and needing no
        grad, as a numpy view (contiguous); None for any other, which ``_checked`` reads."""
        dtype = self.host_dtypes[name]
        if dtype is None or not value.is_cpu:
            return None
        try:
            array = value.numpy()
        except (RuntimeError, TypeError):  # it requires grad, or numpy has no such type
            return None
        if array.dtype != dtype or not array.ndim:
            return None
        return array if array.flags.c_contiguous else np.ascontiguousarray(array)

    def _checked(self, spec: IOSpec, value: torch.Tensor) -> torch.Tensor:
        """The result, detached, once it has a dimension and the expected type."""
        name = spec.name
        if value.dim() == 0:
            raise internal(
                f"model '{self.model}': output '{name}' is a scalar (0-d) tensor; outputs need "
                "at least one dimension"
            )
        if value.dtype != self.expected[name]:
            provided = DATATYPE_OF_TORCH.get(value.dtype)
            provided_name = provided.config_name if provided else str(value.dtype)
            raise internal(
                f"configuration expects datatype {spec.datatype.config_name} for output "
                f"'{name}', model provides {provided_name}"
            )
        return value.detach() if value.requires_grad else value

    def _check_reshape(self, name: str, shape: tuple[int, ...], total: int) -> None:
        dims = self.reshaped[name]
        rows = total if self.batching else 1
        size = int(np.prod(shape))
        per_row = size // rows if rows else 0
        known = int(np.prod([d for d in dims if d >= 0]))
        fits = per_row == known if -1 not in dims else known > 0 and per_row % known == 0
        if not fits:
            raise internal(
                f"model '{self.model}': output '{name}' has shape {list(shape)} "
                f"({per_row} element(s) per request row), which does not fit its configured "
                f"dims {list(dims)}"
            )

    def _split_strings(
        self, spec: IOSpec, value: list[str], requests: Sequence[PreparedRequest], total: int
    ) -> list[Data]:
        """Each request gets the strings at its own offset (the original gave all the first)."""
        name = spec.name
        if not spec.datatype.is_bytes:
            raise internal(
                f"configuration expects datatype {spec.datatype.config_name} for output "
                f"'{name}', model provides List[str] (TYPE_STRING)"
            )
        array = from_strings(value)
        if not self.batching:
            return [array]
        if len(value) % total:
            raise internal(
                f"model '{self.model}': output '{name}' has {len(value)} strings, which do not "
                f"divide among the batch of {total}"
            )
        per_row = len(value) // total
        parts: list[Data] = []
        offset = 0
        for request in requests:
            count = request.batch_size * per_row
            shape = (request.batch_size,) if spec.reshape == () else (request.batch_size, per_row)
            parts.append(array[offset : offset + count].reshape(shape))
            offset += count
        return parts


def flatten(raw: Any) -> list[Any]:
    """Results in order: tuples and lists of tensors are opened, ``List[str]`` stays whole."""
    if isinstance(raw, torch.Tensor) or _is_strings(raw):
        return [raw]
    if isinstance(raw, (tuple, list)):
        flat: list[Any] = []
        for item in raw:
            flat.extend(flatten(item))
        return flat
    return [raw]


def _is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _device_inputs(request: PreparedRequest) -> bool:
    """Whether the request brought device data, and so takes device results back as they are."""
    return any(isinstance(a, DeviceArray) for a in request.inputs.values())
