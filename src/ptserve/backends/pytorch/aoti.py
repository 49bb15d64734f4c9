"""``.pt2`` packages (``platform: "torch_aoti"``): AOTInductor packages or torch.export programs.

Both are zip archives; an AOTInductor package holds compiled code under ``data/aotinductor/``
and is loaded with ``aoti_load_package`` on the instance's device, an exported program with
``torch.export.load``. Inputs go positionally in config order; with batching the program must
have been exported with a dynamic batch dimension.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import torch

from ptserve.backends.base import BackendInstance, BackendModel, InstanceSpec, LoadContext
from ptserve.backends.pytorch.binding import positional
from ptserve.backends.pytorch.devices import Placement, SharedModules, placement_for
from ptserve.backends.pytorch.outputs import OutputPlan
from ptserve.backends.pytorch.runner import (
    COMPILE_LOCK,
    ModelCall,
    RunPlan,
    TorchInstance,
    check_string_shapes,
    first_line,
)
from ptserve.backends.pytorch.settings import POOLS, Settings
from ptserve.common.errors import invalid_arg

log = logging.getLogger("ptserve.backends.pytorch")

PLATFORM = "torch_aoti"
DEFAULT_FILENAME = "model.pt2"


def is_aoti_package(path: Path) -> bool:
    """Whether a ``.pt2`` archive holds AOTInductor code (else it is an exported program)."""
    with zipfile.ZipFile(path) as archive:
        return any("/data/aotinductor/" in name for name in archive.namelist())


class Pt2Model(BackendModel):
    """One version of a ``.pt2`` model."""

    def __init__(self, context: LoadContext, path: Path) -> None:
        self.context = context
        self.name = context.name
        self.path = path
        if not path.is_file():
            raise invalid_arg(
                f"model '{context.name}' version {context.version}: unable to find model file "
                f"'{path}'"
            )
        for spec in context.io.model_inputs + context.io.model_outputs:
            if spec.datatype.is_bytes:
                raise invalid_arg(
                    f"model '{context.name}': '{spec.name}' is a string tensor; .pt2 programs "
                    "take and return tensors only"
                )
        check_string_shapes(context.name, context.io)
        self.settings = Settings.from_config(context.config)
        self.settings.log_settings(context.name)
        POOLS.claim(context.name, self.settings)
        if self.settings.method != "forward":
            raise invalid_arg(
                f"model '{context.name}': MODEL_METHOD is not supported for .pt2 programs, "
                "which have a single entry point"
            )
        try:
            self.aoti = is_aoti_package(path)
        except zipfile.BadZipFile:
            raise invalid_arg(
                f"model '{context.name}': '{path}' is not a .pt2 archive (expected the output "
                "of torch._inductor.aoti_compile_and_package or torch.export.save)"
            ) from None
        kind = "AOTInductor package" if self.aoti else "torch.export program"
        self.shared: SharedModules[ModelCall] = SharedModules(self.settings.weight_sharing, kind)
        self.plan = RunPlan(
            context.name,
            context.io,
            self.settings,
            positional([s.name for s in context.io.model_inputs]),
            OutputPlan(context.name, context.io),
        )
        log.info(
            "model '%s': '%s' is a%s %s", context.name, path.name, "n" if self.aoti else "", kind
        )

    def _load(self, placement: Placement) -> ModelCall:
        device = placement.load_device
        try:
            if self.aoti:
                index = device.index if device is not None and device.type == "cuda" else -1
                loaded: ModelCall = torch._inductor.aoti_load_package(
                    str(self.path), device_index=-1 if index is None else index
                )
                return loaded
            program = torch.export.load(str(self.path))
            module = program.module()
            if device is not None:
                module = module.to(device)
            return module
        except Exception as exc:
            raise invalid_arg(
                f"model '{self.name}' version {self.context.version}: failed to load "
                f"'{self.path}': {first_line(exc)}"
            ) from None

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        placement = placement_for(spec)
        with COMPILE_LOCK:
            call = self.shared.get(placement, spec.name, lambda: self._load(placement))
        return TorchInstance(self.plan, spec.name, placement, call)

    def unload(self) -> None:
        self.shared.clear()
