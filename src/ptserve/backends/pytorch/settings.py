"""The backend's parameters: parsed once at load, logged, and applied around each execution.

Some torch settings are process-wide (thread pools, executor modes, cuDNN). Thread pools are
claimed by the first model that sets them (``execution.ThreadPools``); a later model asking for a
different size gets a warning. Executor modes and cuDNN are switched for the duration of each
execution and restored.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ptserve.backends.pytorch.execution import grad_scope
from ptserve.common.errors import invalid_arg
from ptserve.config import parameters as params
from ptserve.config.parameters import execution_timeout_ms
from ptserve.config.parse import ModelConfig

log = logging.getLogger("ptserve.backends.pytorch")

COMPILE_KEYS = ("fullgraph", "dynamic", "backend", "mode", "options", "disable")
METHOD_PARAMETER = "MODEL_METHOD"
MEMORY_FORMAT_PARAMETER = "INPUT_MEMORY_FORMAT"
MEMORY_FORMATS = ("auto", "contiguous", "channels_last")


@dataclass(frozen=True, slots=True)
class Settings:
    """Every backend parameter of one model, with the defaults of the original backend."""

    inference_mode: bool = True
    disable_optimized_execution: bool = False
    disable_cudnn: bool = False
    weight_sharing: bool = False
    cache_cleaning: bool = False
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    jit_executor: bool | None = None
    jit_profiling: bool | None = None
    tensor_fuser: bool | None = None
    compile_options: dict[str, Any] = field(default_factory=dict)
    method: str = "forward"
    memory_format: str = "auto"  # of 4-D float inputs: auto, contiguous, channels_last (layout)
    # Enforced by the version's watchdog in the scheduling layer (any backend); read here too so
    # that it is checked and logged with the other parameters.
    execution_timeout_ms: int = 0
    # Whether executions change process-wide torch modes (and must restore them): decided once.
    switches_modes: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        switches = (
            self.disable_optimized_execution
            or self.disable_cudnn
            or self.jit_executor is not None
            or self.jit_profiling is not None
            or self.tensor_fuser is not None
        )
        object.__setattr__(self, "switches_modes", switches)

    @classmethod
    def from_config(cls, config: ModelConfig) -> Settings:
        """Parse every parameter; a bad value fails the load with the original's message."""
        return cls(
            inference_mode=params.bool_param(config, "INFERENCE_MODE", True),
            disable_optimized_execution=params.bool_param(
                config, "DISABLE_OPTIMIZED_EXECUTION", False
            ),
            disable_cudnn=params.bool_param(config, "DISABLE_CUDNN", False),
            weight_sharing=params.bool_param(config, "ENABLE_WEIGHT_SHARING", False),
            cache_cleaning=params.bool_param(config, "ENABLE_CACHE_CLEANING", False),
            intra_op_threads=_thread_count(config, "INTRA_OP_THREAD_COUNT", "NUM_THREADS"),
            inter_op_threads=_thread_count(config, "INTER_OP_THREAD_COUNT", "NUM_INTEROP_THREADS"),
            jit_executor=params.optional_bool_param(config, "ENABLE_JIT_EXECUTOR"),
            jit_profiling=params.optional_bool_param(config, "ENABLE_JIT_PROFILING"),
            tensor_fuser=params.optional_bool_param(config, "ENABLE_TENSOR_FUSER"),
            compile_options=_compile_options(config),
            method=_method(config),
            memory_format=_memory_format(config),
            execution_timeout_ms=execution_timeout_ms(config),
        )

    def log_settings(self, model: str) -> None:
        """One line per setting, worded as the original so operators can grep for them."""
        where = f"for model instance '{model}'"
        optimized = _state(not self.disable_optimized_execution)
        log.info("Optimized execution is %s %s", optimized, where)
        log.info("Cache Cleaning is %s %s", _state(self.cache_cleaning), where)
        log.info("Inference Mode is %s %s", _state(self.inference_mode), where)
        log.info("cuDNN is %s %s", _state(not self.disable_cudnn), where)
        log.info("Weight sharing is %s %s", _state(self.weight_sharing), where)
        if self.tensor_fuser is not None:
            log.info("Tensor fuser is %s %s", _state(self.tensor_fuser), where)
        if self.jit_executor is not None:
            log.info("Jit Executor is %s %s", _state(self.jit_executor), where)
        if self.jit_profiling is not None:
            log.info("Jit Profiling is %s %s", _state(self.jit_profiling), where)
        if self.intra_op_threads is not None:
            log.info("Intra op thread count is set to %d %s", self.intra_op_threads, where)
        if self.inter_op_threads is not None:
            log.info("Inter op thread count is set to %d %s", self.inter_op_threads, where)
        if self.execution_timeout_ms:
            log.info("Execution timeout is %d ms %s", self.execution_timeout_ms, where)
        if self.method != "forward":
            log.info("Method '%s' is called instead of forward %s", self.method, where)

    def scope_factory(self) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        """What makes the scope each execution runs in: grad mode, executor modes and cuDNN as
        this model wants them, restored afterwards. A runner asks once and calls it per batch."""
        if not self.switches_modes:  # the common case: just the grad mode
            return grad_scope(self.inference_mode)
        return self._switched_scope

    @contextlib.contextmanager
    def _switched_scope(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            stack.enter_context(grad_scope(self.inference_mode)())
            optimize = not self.disable_optimized_execution
            previous_optimize = torch._C._get_graph_executor_optimize()
            if previous_optimize != optimize:
                torch._C._set_graph_executor_optimize(optimize)
                stack.callback(torch._C._set_graph_executor_optimize, previous_optimize)
            if self.jit_executor is not None:
                old = torch._C._jit_set_profiling_executor(self.jit_executor)
                stack.callback(torch._C._jit_set_profiling_executor, old)
            if self.jit_profiling is not None:
                old = torch._C._jit_set_profiling_mode(self.jit_profiling)
                stack.callback(torch._C._jit_set_profiling_mode, old)
            if self.tensor_fuser is not None:
                old = torch._C._jit_texpr_fuser_enabled()
                torch._C._jit_set_texpr_fuser_enabled(self.tensor_fuser)
                stack.callback(torch._C._jit_set_texpr_fuser_enabled, old)
            cudnn = not self.disable_cudnn
            if torch.backends.cudnn.enabled != cudnn:
                previous_cudnn = torch.backends.cudnn.enabled
                torch.backends.cudnn.enabled = cudnn
                stack.callback(setattr, torch.backends.cudnn, "enabled", previous_cudnn)
            yield


def _state(enabled: bool) -> str:
    return "enabled" if enabled else "disabled"


def _thread_count(config: ModelConfig, key: str, alias: str) -> int | None:
    values = {k: params.int_param(config, k) for k in (key, alias)}
    given = {k: v for k, v in values.items() if v is not None}
    for k, v in given.items():
        if v < 1:
            raise invalid_arg(f"model '{config.name}': parameter {k} must be at least 1, got {v}")
    if len(set(given.values())) > 1:
        raise invalid_arg(
            f"model '{config.name}': parameters {key} ({given[key]}) and {alias} "
            f"({given[alias]}) size the same thread pool; set only one"
        )
    return next(iter(given.values()), None)


def _compile_options(config: ModelConfig) -> dict[str, Any]:
    key = "TORCH_COMPILE_OPTIONAL_PARAMETERS"
    text = params.string_param(config, key)
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise invalid_arg(
            f"model '{config.name}': parameter {key} is not valid JSON ({exc.msg} at "
            f"position {exc.pos}): {text!r}"
        ) from None
    if not isinstance(value, dict):
        raise invalid_arg(
            f"model '{config.name}': parameter {key} must be a JSON object of torch.compile "
            f"arguments, got {type(value).__name__}"
        )
    if "model" in value:
        raise invalid_arg(
            f"model '{config.name}': parameter {key} must not contain 'model': the backend "
            "passes the module from model.py to torch.compile itself"
        )
    unknown = sorted(set(value) - set(COMPILE_KEYS))
    if unknown:
        raise invalid_arg(
            f"model '{config.name}': parameter {key} has unknown key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(COMPILE_KEYS)}"
        )
    return value


def _method(config: ModelConfig) -> str:
    value = params.string_param(config, METHOD_PARAMETER)
    if value is None or not value.strip():
        return "forward"
    method = value.strip()
    if not method.isidentifier():
        raise invalid_arg(
            f"model '{config.name}': parameter {METHOD_PARAMETER} must name a method of the "
            f"model, got {value!r}"
        )
    return method


def _memory_format(config: ModelConfig) -> str:
    value = params.string_param(config, MEMORY_FORMAT_PARAMETER)
    if value is None or not value.strip():
        return "auto"
    chosen = value.strip().lower()
    if chosen not in MEMORY_FORMATS:
        raise invalid_arg(
            f"model '{config.name}': parameter {MEMORY_FORMAT_PARAMETER} must be one of "
            f"{', '.join(MEMORY_FORMATS)}, got {value!r}"
        )
    return chosen
