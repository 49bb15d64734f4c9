"""Running one batch on a loaded model: the part every runtime shares.

Per request: strings decoded (a bad one fails only its request). Per batch: requests grouped by
which optional inputs they carry, inputs concatenated (ragged ones flattened end to end) and
moved to the instance's device, batch inputs generated from the group's requests, the model
called under the model's settings on the instance's stream, results split per request.

Inputs that came as device tensors (``TorchArray``, in-process callers) are used in place when
they sit on the instance's device, else moved once, straight there; the instance's stream first
waits for the caller's stream to have produced them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ptserve.backends.base import BackendInstance
from ptserve.backends.batch_io import batch_input_array, source_shapes
from ptserve.backends.pytorch.binding import InputBinding
from ptserve.backends.pytorch.convert import TorchArray, as_tensor, to_strings, to_torch
from ptserve.backends.pytorch.devices import Placement, clean_cache, stream_scope
from ptserve.backends.pytorch.execution import POOLS
from ptserve.backends.pytorch.outputs import OutputPlan
from ptserve.backends.pytorch.settings import Settings
from ptserve.common import logging_setup
from ptserve.common.device import Data, to_host
from ptserve.common.errors import ServerError, internal, invalid_arg
from ptserve.common.iospec import BatchInputSpec, IOSpec, ModelIO
from ptserve.common.prepared import BatchResult, ExecutionTimes, OutputMap, PreparedRequest

log = logging_setup.module_logger("ptserve.backends.pytorch", __file__)

ModelCall = Callable[..., Any]

# The first use of torch.compile, torch.export or AOTInductor imports dynamo and inductor; from
# several loader threads at once that import fails half-initialised, so those loads (and the
# compiling warm-up) run one model at a time.
COMPILE_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class RunPlan:
    """Everything decided at load about calling one model: shared by its instances."""

    model: str
    io: ModelIO
    settings: Settings
    binding: InputBinding
    outputs: OutputPlan
    thread_default: int | None = None  # intra-op threads when no model set a process-wide size
    channels_last: frozenset[str] = frozenset()  # inputs converted to it (see ``layout``)


def check_string_shapes(model: str, io: ModelIO) -> None:
    """PyTorch strings are ``List[str]``: one-dimensional only, as the original requires."""
    for spec in io.model_inputs + io.model_outputs:
        if spec.datatype.is_bytes:
            shape = spec.model_dims
            if len(shape) > 1:
                raise invalid_arg(
                    f"model '{model}': '{spec.name}' is a string tensor with shape "
                    f"{list(shape)}; PyTorch string tensors (List[str]) must be one-dimensional "
                    "(with batching, use dims [1] and reshape: { shape: [] })"
                )


class TorchInstance(BackendInstance):
    """A callable model on a placement, run by one worker thread."""

    def __init__(
        self,
        plan: RunPlan,
        name: str,
        placement: Placement,
        call: ModelCall,
        probe: bool = False,
    ) -> None:
        self.plan = plan
        self.name = name
        self.placement = placement
        self.call = call
        self.io = plan.io
        self.settings = plan.settings
        self._scope = plan.settings.scope_factory()  # asked once: settings are fixed at load
        self.binding = plan.binding
        self.input_specs: dict[str, IOSpec] = {s.name: s for s in plan.io.model_inputs}
        # Batch inputs: generated per call from the batch's requests, never taken from them.
        self.batch_inputs: dict[str, BatchInputSpec] = {
            name: b for b in plan.io.batch_inputs for name in b.targets
        }
        self.device = placement.input_device
        self._move = self.device.type != "cpu"
        self.warm_on_prepare = False  # a compiled module: run zeros through it before serving
        # Inputs given to the model channels-last; emptied if a batch fails only that way
        # (except in a layout probe's instance, which is not announced either: see layout).
        self.channels_last = plan.channels_last
        self._probe = probe
        if not probe:
            log.info("model instance '%s' of '%s': %s", name, plan.model, placement.describe())

    def execute(self, batch: Sequence[PreparedRequest]) -> BatchResult:
        POOLS.enter_worker(self.plan.thread_default)
        times = ExecutionTimes()
        start = time.perf_counter_ns()
        results: list[OutputMap | ServerError] = [{} for _ in batch]
        groups: dict[frozenset[str], list[tuple[int, dict[str, Any]]]] = {}
        for index, request in enumerate(batch):
            try:
                converted = self._request_inputs(request)
            except ServerError as exc:
                results[index] = exc
                continue
            groups.setdefault(frozenset(converted), []).append((index, converted))
        times.compute_input_ns = time.perf_counter_ns() - start
        # Requests that leave out different optional inputs cannot share one call.
        for members in groups.values():
            self._run_group(batch, members, results, times)
        return BatchResult(results, times)

    def _run_group(
        self,
        batch: Sequence[PreparedRequest],
        members: list[tuple[int, dict[str, Any]]],
        results: list[OutputMap | ServerError],
        times: ExecutionTimes,
    ) -> None:
        indices = [index for index, _ in members]
        requests = [batch[i] for i in indices]
        start = time.perf_counter_ns()
        try:
            try:
                split, output_start = self._compute_on_stream(members, requests, times, start)
            except ServerError:
                if not self.channels_last or self._probe:
                    raise
                split, output_start = self._compute_contiguous(members, requests, times)
            for i, outputs in zip(indices, split, strict=True):
                results[i] = outputs
            times.compute_output_ns += time.perf_counter_ns() - output_start
        except ServerError as failure:
            for i in indices:
                results[i] = failure
        except Exception as late:  # CUDA errors may surface while reading results back
            error = internal(f"PyTorch execute failure: {_describe(late)}")
            for i in indices:
                results[i] = error
        finally:
            if self.settings.cache_cleaning:
                clean_cache(self.placement)

    def _compute_on_stream(
        self,
        members: list[tuple[int, dict[str, Any]]],
        requests: list[PreparedRequest],
        times: ExecutionTimes,
        start: int,
    ) -> tuple[list[OutputMap], int]:
        if self.placement.stream is None:
            return self._compute(members, requests, times, start)
        with stream_scope(self.placement):  # (its exit waits for the stream: output time)
            return self._compute(members, requests, times, start)

    def _compute_contiguous(
        self,
        members: list[tuple[int, dict[str, Any]]],
        requests: list[PreparedRequest],
        times: ExecutionTimes,
    ) -> tuple[list[OutputMap], int]:
        """A batch that failed with channels-last inputs, run again with the inputs as they
        came; if that works, this instance keeps them so (the load-time probe missed a case)."""
        layout = self.channels_last
        self.channels_last = frozenset()
        try:
            result = self._compute_on_stream(members, requests, times, time.perf_counter_ns())
        except ServerError:
            self.channels_last = layout  # the model fails either way: not the layout's doing
            raise
        log.warning(
            "model instance '%s': a batch failed with channels-last inputs and ran contiguous; "
            "its inputs stay contiguous from now on (set INPUT_MEMORY_FORMAT to choose)",
            self.name,
        )
        return result

    def _compute(
        self,
        members: list[tuple[int, dict[str, Any]]],
        requests: list[PreparedRequest],
        times: ExecutionTimes,
        start: int,
    ) -> tuple[list[OutputMap], int]:
        """Gather one group's inputs, call the model, split its outputs per request; returns
        the split and when the output phase began."""
        args = self._arguments(self._gather([inputs for _, inputs in members], requests))
        infer_start = time.perf_counter_ns()
        times.compute_input_ns += infer_start - start
        try:
            with self._scope():
                raw = self.call(*args)
        except Exception as exc:
            raise internal(f"PyTorch execute failure: {_describe(exc)}") from None
        output_start = time.perf_counter_ns()
        times.compute_infer_ns += output_start - infer_start
        return self.plan.outputs.split(raw, requests), output_start

    def _request_inputs(self, request: PreparedRequest) -> dict[str, Any]:
        """Per request: the arrays as they came, or ``List[str]`` for strings (bad strings fail
        only here; strings are read on the host)."""
        converted: dict[str, Any] = {}
        for name, array in request.inputs.items():
            if name in self.batch_inputs:
                continue
            spec = self.input_specs[name]
            if spec.datatype.is_bytes:
                converted[name] = to_strings(to_host(array), f"input '{name}'")
            else:
                converted[name] = array
        return converted

    def _gather(
        self, requests: list[dict[str, Any]], prepared: Sequence[PreparedRequest]
    ) -> dict[str, Any]:
        """Each input of the batch as one tensor (or list of strings); None when left out."""
        gathered: dict[str, Any] = {}
        for name in self.binding.order:
            spec = self.input_specs[name]
            batch_input = self.batch_inputs.get(name)
            if batch_input is not None:
                gathered[name] = self._batch_input(name, batch_input, prepared)
                continue
            if name not in requests[0]:
                gathered[name] = None
                continue
            parts = [r[name] for r in requests]
            if spec.datatype.is_bytes:
                strings: list[str] = []
                for part in parts:
                    strings.extend(part)
                gathered[name] = strings
                continue
            # Ragged inputs reach the model flattened: the requests' elements end to end.
            ragged = spec.allow_ragged_batch and self.io.batching
            if not all(isinstance(part, np.ndarray) for part in parts):
                tensor = self._from_devices(parts, spec, ragged)
                if name in self.channels_last:
                    tensor = tensor.contiguous(memory_format=torch.channels_last)
                gathered[name] = tensor
                continue
            if ragged:
                parts = [part.reshape(-1) for part in parts]
            array = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
            tensor = to_torch(array, spec.datatype)
            if self._move:
                tensor = tensor.to(self.device, non_blocking=True)
            if name in self.channels_last:
                tensor = tensor.contiguous(memory_format=torch.channels_last)
            gathered[name] = tensor
        return gathered

    def _from_devices(self, parts: list[Data], spec: IOSpec, ragged: bool) -> torch.Tensor:
        """One input of a batch in which some requests carry device tensors: each part as a
        tensor on the instance's device (the caller's own where it is already there), joined
        there."""
        tensors: list[torch.Tensor] = []
        for part in parts:
            tensor = as_tensor(part, spec.datatype)
            if isinstance(part, TorchArray) and part.ready is not None:
                # Produced on the caller's stream: wait for it on the stream that reads it.
                torch.cuda.current_stream(tensor.device).wait_event(part.ready)
            if tensor.device != self.device:
                # Straight to the instance's device; a copy to the host must be complete.
                tensor = tensor.to(self.device, non_blocking=self._move)
            elif self.placement.stream is not None:
                # The caller's memory is read on this stream: keep it from reuse until done.
                tensor.record_stream(self.placement.stream)
            if ragged:
                tensor = tensor.reshape(-1)
            tensors.append(tensor)
        return tensors[0].contiguous() if len(tensors) == 1 else torch.cat(tensors, dim=0)

    def _batch_input(
        self, name: str, spec: BatchInputSpec, prepared: Sequence[PreparedRequest]
    ) -> torch.Tensor:
        """One target of a batch input, from the shapes of its source input in the batch."""
        shapes = source_shapes(spec.source, prepared, f"batch input '{name}'")
        tensor = to_torch(batch_input_array(spec, shapes), spec.datatype)
        if self._move:
            tensor = tensor.to(self.device, non_blocking=True)
        return tensor

    def _arguments(self, gathered: dict[str, Any]) -> list[Any]:
        if self.binding.dictionary:
            return [{k: v for k, v in gathered.items() if v is not None}]
        args: list[Any] = []
        for slot in self.binding.slots:
            if slot.packing == "list":
                args.append([gathered[name] for name in slot.names])
            elif slot.packing == "tuple":
                args.append(tuple(gathered[name] for name in slot.names))
            else:
                args.append(gathered[slot.names[0]])
        return args

    def prepare(self) -> None:
        if self.warm_on_prepare:
            with COMPILE_LOCK:
                self.warm_up()

    def warm_up(self) -> None:
        """Run zeros through the model at load, so compilation never waits on a user request.

        Batch size 1 first, then a larger batch with variable dimensions at 2: torch.compile
        then holds a graph for size 1 and a dynamic one for the rest.
        """
        shapes = [(1, 1)]
        if self.io.max_batch_size > 1 or any(-1 in s.model_dims for s in self.io.model_inputs):
            shapes.append((min(max(self.io.max_batch_size, 1), 2), 2))
        started = time.monotonic()
        for batch_size, variable in shapes:
            request = zeros_request(self.io, batch_size, variable)
            result = self.execute([request]).results[0]
            if isinstance(result, ServerError):
                log.warning(
                    "model instance '%s': warm-up with zero inputs failed (%s); compilation "
                    "will happen on the first request instead",
                    self.name,
                    result.message,
                )
                return
        log.info(
            "model instance '%s': warmed up (compiled) in %.2f s",
            self.name,
            time.monotonic() - started,
        )


def zeros_request(io: ModelIO, batch_size: int, variable: int) -> PreparedRequest:
    """A request of zeros ("0" for strings) for every input, variable dimensions at
    ``variable``."""
    inputs: dict[str, Data] = {}
    for spec in io.inputs + io.extra_inputs:  # sequence control and state inputs too
        dims = spec.model_dims
        shape = ([batch_size] if io.batching else []) + [variable if d < 0 else d for d in dims]
        if spec.datatype.is_bytes:
            array = np.empty(shape, dtype=object)
            array.fill(b"0")
        else:
            array = np.zeros(shape, dtype=spec.datatype.numpy)
        inputs[spec.name] = array
    outputs = tuple(o.name for o in io.outputs)
    size = batch_size if io.batching else 1
    return PreparedRequest("warm-up", inputs, size, outputs)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    # TorchScript errors carry a traceback of the scripted code; the last line is the reason.
    return lines[-1].strip() if len(lines) > 1 else lines[0]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def sample_device(module: torch.nn.Module) -> torch.device | None:
    """The device of a module's first parameter (or buffer), None when it has neither."""
    for parameter in module.parameters():
        return parameter.device
    for buffer in module.buffers():
        return buffer.device
    return None
