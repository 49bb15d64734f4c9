"""The TorchScript runtime: ``model.pt`` loaded with ``torch.jit.load``, bound by its schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ptserve.backends.base import BackendInstance, BackendModel, InstanceSpec, LoadContext
from ptserve.backends.pytorch.binding import Argument, InputBinding, bind_inputs
from ptserve.backends.pytorch.devices import SharedModules, placement_for
from ptserve.backends.pytorch.execution import POOLS
from ptserve.backends.pytorch.layout import choose_layout
from ptserve.backends.pytorch.outputs import OutputPlan
from ptserve.backends.pytorch.runner import (
    RunPlan,
    TorchInstance,
    check_string_shapes,
    first_line,
)
from ptserve.backends.pytorch.settings import Settings
from ptserve.common import logging_setup
from ptserve.common.errors import invalid_arg

log = logging_setup.module_logger("ptserve.backends.pytorch", __file__)


class TorchScriptInstance(TorchInstance):
    """A TorchScript module called by one worker thread."""


class TorchScriptModel(BackendModel):
    """One version of a TorchScript model: its file, settings, binding plan and shared modules."""

    def __init__(self, context: LoadContext, path: Path, settings: Settings | None = None) -> None:
        self.context = context
        self.path = path
        if not self.path.is_file():
            raise invalid_arg(
                f"model '{context.name}' version {context.version}: unable to find model file "
                f"'{self.path}'"
            )
        check_string_shapes(context.name, context.io)
        if settings is None:
            settings = Settings.from_config(context.config)
            settings.log_settings(context.name)
            POOLS.claim(context.name, settings)
        self.settings = settings
        self.shared: SharedModules[torch.jit.ScriptModule] = SharedModules(
            settings.weight_sharing, "TorchScript model"
        )
        self.outputs = OutputPlan(context.name, context.io)
        self.plan: RunPlan | None = None

    def load_module(self, device: torch.device | None) -> torch.jit.ScriptModule:
        try:
            module: torch.jit.ScriptModule = torch.jit.load(  # type: ignore[no-untyped-call]
                str(self.path), map_location=device
            )
        except Exception as exc:  # torch raises many types for corrupt or foreign files
            raise invalid_arg(
                f"model '{self.context.name}' version {self.context.version}: failed to load "
                f"'{self.path}' as TorchScript: {first_line(exc)}"
            ) from None
        module.eval()
        return module

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        placement = placement_for(spec)
        module = self.shared.get(
            placement, spec.name, lambda: self.load_module(placement.load_device)
        )
        method = self._method(module)
        if self.plan is None:
            plan = RunPlan(
                self.context.name,
                self.context.io,
                self.settings,
                self._bind(method),
                self.outputs,
            )
            self.plan = choose_layout(plan, placement, module, self._method)
        return TorchScriptInstance(self.plan, spec.name, placement, method)

    def _method(self, module: torch.jit.ScriptModule) -> Any:
        name = self.settings.method
        method = getattr(module, name, None)
        if method is None or not hasattr(method, "schema"):
            exported = sorted(module._c._method_names())
            raise invalid_arg(
                f"model '{self.context.name}': the TorchScript module has no method '{name}' "
                f"(it has {', '.join(exported) or 'none'}; methods other than forward need "
                "@torch.jit.export)"
            )
        result: Any = method
        return result

    def _bind(self, method: Any) -> InputBinding:
        schema = method.schema
        arguments = [Argument(a.name, str(a.type)) for a in schema.arguments[1:]]
        io = self.context.io
        binding = bind_inputs(self.context.name, arguments, [s.name for s in io.model_inputs])
        self._check_optional(binding, arguments)
        log.info(
            "model '%s': inputs bound by %s: %s",
            self.context.name,
            binding.convention,
            ", ".join(binding.order),
        )
        return binding

    def _check_optional(self, binding: InputBinding, arguments: list[Argument]) -> None:
        """An ``optional: true`` input must meet an argument that accepts None."""
        if binding.dictionary:
            return
        for slot, arg in zip(binding.slots, arguments, strict=False):
            for name in slot.names:
                spec = self.context.io.input(name)
                if spec is not None and spec.optional and arg.type != "Optional[Tensor]":
                    raise invalid_arg(
                        f"model '{self.context.name}': input '{name}' is optional in the "
                        f"configuration, but it is bound to argument '{arg.name}' of type "
                        f"{arg.type}; declare it Optional[Tensor] so the model accepts None"
                    )

    def unload(self) -> None:
        self.shared.clear()
