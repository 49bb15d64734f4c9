"""The TorchScript runtime: ``model.pt`` loaded with ``torch.jit.load``, called batch by batch."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ptserve.backends.base import (
    BackendInstance,
    BackendModel,
    BatchResult,
    ExecutionTimes,
    InstanceSpec,
    LoadContext,
)
from ptserve.backends.pytorch import params
from ptserve.backends.pytorch.binding import Argument, InputBinding, bind_inputs, bind_outputs
from ptserve.backends.pytorch.convert import (
    DATATYPE_OF_TORCH,
    TORCH_DTYPES,
    from_strings,
    to_numpy,
    to_strings,
    to_torch,
)
from ptserve.core.errors import ServerError, internal, invalid_arg
from ptserve.core.iospec import IOSpec
from ptserve.core.prepared import OutputMap, PreparedRequest

log = logging.getLogger("ptserve.backends.pytorch")


@dataclass(frozen=True, slots=True)
class Settings:
    """The model's backend parameters, read once at load."""

    inference_mode: bool
    disable_optimized_execution: bool

    @classmethod
    def from_config(cls, context: LoadContext) -> Settings:
        config = context.config
        return cls(
            inference_mode=params.bool_param(config, "INFERENCE_MODE", True),
            disable_optimized_execution=params.bool_param(
                config, "DISABLE_OPTIMIZED_EXECUTION", False
            ),
        )


def device_for(spec: InstanceSpec) -> torch.device | None:
    """Where an instance's inputs go; None for KIND_MODEL (the model keeps its own placement)."""
    if spec.kind == "KIND_GPU":
        if not torch.cuda.is_available():
            raise invalid_arg(
                f"instance '{spec.name}' is KIND_GPU but no CUDA device is available; "
                "use KIND_CPU or KIND_AUTO"
            )
        if spec.device_id >= torch.cuda.device_count():
            raise invalid_arg(
                f"instance '{spec.name}' asks for GPU {spec.device_id} but only "
                f"{torch.cuda.device_count()} are visible"
            )
        return torch.device("cuda", spec.device_id)
    if spec.kind == "KIND_MODEL":
        return None
    return torch.device("cpu")


class TorchScriptModel(BackendModel):
    """One version of a TorchScript model: its file, settings and binding plan."""

    def __init__(self, context: LoadContext, filename: str) -> None:
        self.context = context
        self.path = context.version_dir / filename
        if not self.path.is_file():
            raise invalid_arg(
                f"model '{context.name}' version {context.version}: unable to find model file "
                f"'{self.path}'"
            )
        self.settings = Settings.from_config(context)
        self._check_strings()

    def _check_strings(self) -> None:
        io = self.context.io
        for spec in io.model_inputs + io.model_outputs:
            if spec.datatype.is_bytes:
                shape = spec.reshape if spec.reshape is not None else spec.dims
                if len(shape) > 1:
                    raise invalid_arg(
                        f"model '{self.context.name}': '{spec.name}' is a string tensor with "
                        f"shape {list(shape)}; PyTorch string tensors (List[str]) must be "
                        "one-dimensional (with batching, use dims [1] and reshape: { shape: [] })"
                    )

    def load_module(self, device: torch.device | None) -> torch.jit.ScriptModule:
        try:
            module: torch.jit.ScriptModule = torch.jit.load(  # type: ignore[no-untyped-call]
                str(self.path), map_location=device
            )
        except Exception as exc:  # torch raises many types for corrupt or foreign files
            raise invalid_arg(
                f"model '{self.context.name}' version {self.context.version}: failed to load "
                f"'{self.path}' as TorchScript: {_first_line(exc)}"
            ) from None
        module.eval()
        return module

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        device = device_for(spec)
        module = self.load_module(device)
        return TorchScriptInstance(self, spec, module, device)


class TorchScriptInstance(BackendInstance):
    """A loaded module, called by one worker thread."""

    def __init__(
        self,
        model: TorchScriptModel,
        spec: InstanceSpec,
        module: torch.jit.ScriptModule,
        device: torch.device | None,
    ) -> None:
        self.model = model
        self.spec = spec
        self.module = module
        self.device = device
        context = model.context
        self.io = context.io
        self.name = context.name
        self.settings = model.settings
        self.binding = self._bind_inputs()
        self.output_indices = dict(
            zip(
                (o.name for o in self.io.outputs),
                bind_outputs(self.name, [o.name for o in self.io.outputs]),
                strict=True,
            )
        )
        self.input_specs = {s.name: s for s in self.io.model_inputs}
        self.output_specs = {s.name: s for s in self.io.model_outputs}
        state = "enabled" if self.settings.inference_mode else "disabled"
        log.info("Inference Mode is %s for model instance '%s'", state, spec.name)
        state = "disabled" if self.settings.disable_optimized_execution else "enabled"
        log.info("Optimized execution is %s for model instance '%s'", state, spec.name)

    def _bind_inputs(self) -> InputBinding:
        try:
            schema = self.module.forward.schema  # type: ignore[attr-defined]
        except AttributeError:
            raise invalid_arg(
                f"model '{self.name}': the TorchScript module has no forward method"
            ) from None
        arguments = [Argument(a.name, str(a.type)) for a in schema.arguments[1:]]
        binding = bind_inputs(self.name, arguments, [s.name for s in self.io.model_inputs])
        log.info(
            "model '%s': inputs bound by %s: %s",
            self.name,
            binding.convention,
            ", ".join(binding.order),
        )
        return binding

    @contextlib.contextmanager
    def _mode(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            if self.settings.inference_mode:
                stack.enter_context(torch.inference_mode())
            else:
                stack.enter_context(torch.no_grad())
            if self.settings.disable_optimized_execution:
                previous = torch._C._get_graph_executor_optimize()
                torch._C._set_graph_executor_optimize(False)
                stack.callback(torch._C._set_graph_executor_optimize, previous)
            yield

    def execute(self, batch: Sequence[PreparedRequest]) -> BatchResult:
        times = ExecutionTimes()
        start = time.perf_counter_ns()
        results: list[OutputMap | ServerError] = [{} for _ in batch]
        live: list[int] = []
        per_request: list[dict[str, Any]] = []
        for index, request in enumerate(batch):
            try:
                per_request.append(self._request_inputs(request))
                live.append(index)
            except ServerError as exc:
                per_request.append({})
                results[index] = exc
        if not live:
            times.compute_input_ns = time.perf_counter_ns() - start
            return BatchResult(results, times)
        try:
            args = self._gather([per_request[i] for i in live])
        except ServerError as exc:
            for i in live:
                results[i] = exc
            return BatchResult(results, times)
        infer_start = time.perf_counter_ns()
        times.compute_input_ns = infer_start - start
        try:
            with self._mode():
                if self.binding.dictionary:
                    raw = self.module(dict(zip(self.binding.order, args, strict=True)))
                else:
                    raw = self.module(*args)
        except Exception as exc:
            error = internal(f"PyTorch execute failure: {_describe(exc)}")
            for i in live:
                results[i] = error
            times.compute_infer_ns = time.perf_counter_ns() - infer_start
            return BatchResult(results, times)
        output_start = time.perf_counter_ns()
        times.compute_infer_ns = output_start - infer_start
        live_requests = [batch[i] for i in live]
        try:
            split = self._split_outputs(raw, live_requests)
            for i, outputs in zip(live, split, strict=True):
                results[i] = outputs
        except ServerError as exc:
            for i in live:
                results[i] = exc
        times.compute_output_ns = time.perf_counter_ns() - output_start
        return BatchResult(results, times)

    def _request_inputs(self, request: PreparedRequest) -> dict[str, Any]:
        """Per request: numpy arrays, or ``List[str]`` for strings (bad strings fail only here)."""
        converted: dict[str, Any] = {}
        for name, array in request.inputs.items():
            spec = self.input_specs[name]
            if spec.datatype.is_bytes:
                converted[name] = to_strings(array, f"input '{name}'")
            else:
                converted[name] = array
        return converted

    def _gather(self, requests: list[dict[str, Any]]) -> list[Any]:
        args: list[Any] = []
        for name in self.binding.order:
            spec = self.input_specs[name]
            parts = [r[name] for r in requests]
            if spec.datatype.is_bytes:
                strings: list[str] = []
                for part in parts:
                    strings.extend(part)
                args.append(strings)
                continue
            if spec.allow_ragged_batch and self.io.batching:
                # Ragged inputs reach the model flattened: the requests' elements end to end.
                parts = [part.reshape(-1) for part in parts]
            array = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
            tensor = to_torch(array, spec.datatype)
            if self.device is not None and self.device.type != "cpu":
                tensor = tensor.to(self.device, non_blocking=True)
            args.append(tensor)
        return args

    def _split_outputs(self, raw: Any, requests: list[PreparedRequest]) -> list[OutputMap]:
        values = _as_output_list(raw)
        wanted: list[str] = []
        for request in requests:
            for name in request.outputs:
                if name not in wanted:
                    wanted.append(name)
        total = sum(r.batch_size for r in requests)
        batching = self.io.batching
        per_output: dict[str, list[np.ndarray]] = {}
        for name in wanted:
            spec = self.output_specs[name]
            index = self.output_indices[name]
            if index >= len(values):
                raise internal(
                    f"model '{self.name}': output '{name}' is result {index} of forward, but "
                    f"the model returned {len(values)} result(s)"
                )
            per_output[name] = self._split_one(spec, values[index], requests, total, batching)
        return [
            {name: per_output[name][i] for name in request.outputs}
            for i, request in enumerate(requests)
        ]

    def _split_one(
        self,
        spec: IOSpec,
        value: Any,
        requests: list[PreparedRequest],
        total: int,
        batching: bool,
    ) -> list[np.ndarray]:
        name = spec.name
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            if not spec.datatype.is_bytes:
                raise internal(
                    f"configuration expects datatype {spec.datatype.config_name} for output "
                    f"'{name}', model provides List[str] (TYPE_STRING)"
                )
            array = from_strings(value)
            if not batching:
                return [array]
            if len(value) % total:
                raise internal(
                    f"model '{self.name}': output '{name}' has {len(value)} strings, which do "
                    f"not divide among the batch of {total}"
                )
            per_row = len(value) // total
            parts: list[np.ndarray] = []
            offset = 0
            for request in requests:
                count = request.batch_size * per_row
                part = array[offset : offset + count]
                shape = (
                    (request.batch_size,) if spec.reshape == () else (request.batch_size, per_row)
                )
                parts.append(part.reshape(shape))
                offset += count
            return parts
        if not isinstance(value, torch.Tensor):
            raise internal(
                f"model '{self.name}': output '{name}' is a {type(value).__name__}; outputs must "
                "be Tensors or List[str]"
            )
        if value.dim() == 0:
            raise internal(
                f"model '{self.name}': output '{name}' is a scalar (0-d) tensor; outputs need at "
                "least one dimension"
            )
        expected = TORCH_DTYPES.get(spec.datatype.name)
        if value.dtype != expected:
            provided = DATATYPE_OF_TORCH.get(value.dtype)
            provided_name = provided.config_name if provided else str(value.dtype)
            raise internal(
                f"configuration expects datatype {spec.datatype.config_name} for output "
                f"'{name}', model provides {provided_name}"
            )
        array = to_numpy(value.detach())
        if not batching:
            return [array]
        if array.shape[0] != total:
            raise internal(
                f"model '{self.name}': output '{name}' has batch dimension {array.shape[0]}, but "
                f"the batch holds {total} request row(s)"
            )
        parts = []
        offset = 0
        for request in requests:
            parts.append(array[offset : offset + request.batch_size])
            offset += request.batch_size
        return parts


def _as_output_list(raw: Any) -> list[Any]:
    if isinstance(raw, torch.Tensor):
        return [raw]
    if isinstance(raw, tuple):
        return list(raw)
    if isinstance(raw, list):
        if all(isinstance(v, str) for v in raw):
            return [raw]
        return list(raw)
    return [raw]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    # TorchScript errors carry a traceback of the scripted code; the last line is the reason.
    return lines[-1].strip() if len(lines) > 1 else lines[0]
