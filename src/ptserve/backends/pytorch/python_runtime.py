"""The Python runtime (``runtime: "model.py"``): an ``nn.Module`` from model.py, torch.compile'd.

The module is built with no arguments, given the sibling ``model.pt`` state_dict when there is
one, moved to the instance's device, put in eval mode and compiled; each instance is warmed up
at load, on the worker thread that will run it, so compilation never waits on a user's request
and the CUDA graphs of ``mode="reduce-overhead"`` are recorded by the thread that replays them.
Inputs go positionally in config order.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from ptserve.backends.base import BackendInstance, BackendModel, InstanceSpec, LoadContext
from ptserve.backends.pytorch.binding import positional
from ptserve.backends.pytorch.devices import Placement, placement_for
from ptserve.backends.pytorch.execution import POOLS
from ptserve.backends.pytorch.layout import choose_layout
from ptserve.backends.pytorch.outputs import OutputPlan
from ptserve.backends.pytorch.runner import (
    COMPILE_LOCK,
    ModelCall,
    RunPlan,
    TorchInstance,
    check_string_shapes,
    first_line,
    sample_device,
)
from ptserve.backends.pytorch.settings import Settings
from ptserve.backends.pytorch.torchscript import TorchScriptModel
from ptserve.common.errors import invalid_arg

log = logging.getLogger("ptserve.backends.pytorch")

RUNTIME = "model.py"
PYTHON_THREAD_DEFAULT = 1  # NUM_THREADS' default in the Python runtime
_import_lock = threading.Lock()
COMPILED_LAYOUTS = "torch.compile chooses the memory formats inside what it compiles"


class PythonModel(BackendModel):
    """One version of a model.py model: its class, weights file and compile options."""

    def __init__(self, context: LoadContext, path: Path, settings: Settings) -> None:
        self.context = context
        self.path = path
        self.name = context.name
        self.settings = settings
        check_string_shapes(context.name, context.io)
        if settings.weight_sharing:
            log.warning(
                "model '%s': ENABLE_WEIGHT_SHARING is ignored by the Python runtime; each "
                "instance builds its own module",
                self.name,
            )
        self.module_class = self._find_class(self._import())
        self.weights = path.parent / "model.pt"
        self.plan = RunPlan(
            context.name,
            context.io,
            settings,
            positional([s.name for s in context.io.model_inputs]),
            OutputPlan(context.name, context.io),
            thread_default=PYTHON_THREAD_DEFAULT,
        )
        self.layout_chosen = False  # the plan's input layout is decided with the first module

    def _import(self) -> ModuleType:
        module_name = f"ptserve_model_{self.name}_{self.context.version}".replace("-", "_")
        spec = importlib.util.spec_from_file_location(module_name, self.path)
        if spec is None or spec.loader is None:
            raise invalid_arg(f"model '{self.name}': cannot import '{self.path}'")
        module = importlib.util.module_from_spec(spec)
        with _import_lock:
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                sys.modules.pop(module_name, None)
                raise invalid_arg(
                    f"model '{self.name}': importing '{self.path}' failed: "
                    f"{type(exc).__name__}: {first_line(exc)}"
                ) from None
        return module

    def _find_class(self, module: ModuleType) -> type[nn.Module]:
        """The first nn.Module subclass defined in model.py, by name as in the original."""
        found = sorted(
            (
                (name, value)
                for name, value in inspect.getmembers(module, inspect.isclass)
                if issubclass(value, nn.Module) and value.__module__ == module.__name__
            ),
            key=lambda item: item[0],
        )
        if not found:
            raise invalid_arg(
                f"model '{self.name}': '{self.path}' defines no torch.nn.Module subclass; wrap "
                "the model (a plain function cannot be served) in a class that extends nn.Module"
            )
        if len(found) > 1:
            log.warning(
                "model '%s': model.py defines several nn.Module classes (%s); serving '%s', "
                "the first by name",
                self.name,
                ", ".join(name for name, _ in found),
                found[0][0],
            )
        return found[0][1]

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        placement = placement_for(spec)
        module = self._build(placement)
        if placement.kind == "KIND_MODEL":
            device = sample_device(module)
            if device is None:
                raise invalid_arg(
                    f"model '{self.name}': instance '{spec.name}' is KIND_MODEL, but the module "
                    "has no parameters or buffers to tell its device; use KIND_CPU or KIND_GPU"
                )
            placement = Placement(placement.kind, None, device, placement.stream)
        if not self.layout_chosen:
            # (Probed uncompiled: torch.compile is only entered under COMPILE_LOCK.)
            obstacle = COMPILED_LAYOUTS if self.compiled else None
            self.plan = choose_layout(self.plan, placement, module, self._target, obstacle)
            self.layout_chosen = True
        with COMPILE_LOCK:
            instance = TorchInstance(self.plan, spec.name, placement, self._compile(module))
        # Compiled on the first calls: the warm-up, on the instance's worker thread (prepare).
        instance.warm_on_prepare = self.compiled
        return instance

    @property
    def compiled(self) -> bool:
        """Whether torch.compile compiles the module (not with ``"disable": true``)."""
        return not self.settings.compile_options.get("disable", False)

    def _build(self, placement: Placement) -> nn.Module:
        try:
            module = self.module_class()
        except Exception as exc:
            raise invalid_arg(
                f"model '{self.name}': building {self.module_class.__name__}() with no "
                f"arguments failed: {type(exc).__name__}: {first_line(exc)}"
            ) from None
        if self.weights.is_file():
            self._load_weights(module)
        if placement.load_device is not None:
            module = module.to(placement.load_device)
        return module.eval()

    def _load_weights(self, module: nn.Module) -> None:
        try:
            state = torch.load(str(self.weights), map_location="cpu", weights_only=True)
        except Exception as exc:
            raise invalid_arg(
                f"model '{self.name}': '{self.weights}' is not a loadable state_dict: "
                f"{first_line(exc)}"
            ) from None
        if not isinstance(state, dict):
            raise invalid_arg(
                f"model '{self.name}': '{self.weights}' holds a {type(state).__name__}, not a "
                "state_dict (save it with torch.save(module.state_dict(), path))"
            )
        try:
            module.load_state_dict(state)
        except Exception as exc:
            raise invalid_arg(
                f"model '{self.name}': '{self.weights}' does not fit "
                f"{self.module_class.__name__}: {first_line(exc)}"
            ) from None

    def _target(self, module: nn.Module) -> ModelCall:
        """What is served of ``module``: the module itself (its hooks run) for ``forward``,
        else its ``MODEL_METHOD``."""
        method_name = self.settings.method
        method = getattr(module, method_name, None)
        if not callable(method):
            raise invalid_arg(
                f"model '{self.name}': {self.module_class.__name__} has no method '{method_name}'"
            )
        target: ModelCall = module if method_name == "forward" else method
        return target

    def _compile(self, module: nn.Module) -> ModelCall:
        target = self._target(module)
        options: dict[str, Any] = dict(self.settings.compile_options)
        try:
            compiled: ModelCall = torch.compile(target, **options)
        except Exception as exc:
            raise invalid_arg(
                f"model '{self.name}': torch.compile rejected TORCH_COMPILE_OPTIONAL_PARAMETERS "
                f"{options}: {first_line(exc)}"
            ) from None
        return compiled


def load(context: LoadContext, path: Path) -> BackendModel:
    """A model.py model, or a TorchScript ``.pt`` when that is the file the runtime found."""
    settings = Settings.from_config(context.config)
    settings.log_settings(context.name)
    POOLS.claim(context.name, settings)
    if path.suffix == ".py":
        return PythonModel(context, path, settings)
    log.info("model '%s': Python runtime found '%s'; loading it as TorchScript", context.name, path)
    return TorchScriptModel(context, path, settings)


def select_file(version_dir: Path, default_filename: str) -> Path:
    """``default_model_filename`` first, then model.py, then model.pt."""
    candidates = [c for c in (default_filename, "model.py", "model.pt") if c]
    for candidate in candidates:
        path = version_dir / candidate
        if path.is_file():
            return path
    return version_dir / (default_filename or "model.py")
