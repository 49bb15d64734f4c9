"""``.pt2`` packages (``platform: "torch_aoti"``): AOTInductor packages or torch.export programs.

Both are zip archives; an AOTInductor package holds compiled code under ``data/aotinductor/``
and is loaded with ``aoti_load_package`` on the instance's device, an exported program with
``torch.export.load``. Either is called on the flat list of its input tensors (the leaves of
its call spec) and returns the flat list of its results; ``pt2_names`` says which config tensor
is which leaf. With batching the program must have been exported with a dynamic batch dimension.
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree

from ptserve.backends.base import BackendInstance, BackendModel, InstanceSpec, LoadContext
from ptserve.backends.pytorch.binding import positional
from ptserve.backends.pytorch.devices import Placement, SharedModules, placement_for
from ptserve.backends.pytorch.execution import POOLS
from ptserve.backends.pytorch.layout import channels_last_candidates, choose_layout
from ptserve.backends.pytorch.outputs import OutputPlan
from ptserve.backends.pytorch.pt2_names import LeafMap, map_names
from ptserve.backends.pytorch.runner import (
    COMPILE_LOCK,
    RunPlan,
    TorchInstance,
    check_string_shapes,
    first_line,
)
from ptserve.backends.pytorch.settings import MEMORY_FORMAT_PARAMETER, Settings
from ptserve.common.errors import invalid_arg

log = logging.getLogger("ptserve.backends.pytorch")

PLATFORM = "torch_aoti"
DEFAULT_FILENAME = "model.pt2"
AOTI_LAYOUTS = (
    "AOTInductor code is compiled for the memory formats of the inputs it was exported with"
)


FlatRun = Callable[[list[torch.Tensor]], list[torch.Tensor]]


class Pt2Call:
    """A program called on the config's tensors: the inputs (in config order) placed on their
    leaves, the result leaves returned by config output name (or, under the earlier rule, as
    the program's own result)."""

    def __init__(
        self,
        run: FlatRun,
        inputs: LeafMap,
        outputs: LeafMap,
        output_names: list[str],
        out_spec: pytree.TreeSpec,
        module: torch.nn.Module | None = None,
        in_spec: pytree.TreeSpec | None = None,
    ) -> None:
        self.run = run
        self.module = module  # an exported program's (None for AOTInductor code)
        self.in_spec = in_spec
        self.leaf_maps = (inputs, outputs, output_names)
        self.input_leaves = inputs.leaves
        self.outputs = (
            None
            if outputs.leaves is None
            else tuple(zip(output_names, outputs.leaves, strict=True))
        )
        self.out_spec = out_spec

    def __call__(self, *tensors: torch.Tensor) -> Any:
        flat = list(tensors)
        if self.input_leaves is not None:
            for tensor, leaf in zip(tensors, self.input_leaves, strict=True):
                flat[leaf] = tensor
        results = self.run(flat)
        if self.outputs is None:
            return pytree.tree_unflatten(results, self.out_spec)
        return {name: results[leaf] for name, leaf in self.outputs}

    def with_module(self, module: torch.nn.Module) -> Pt2Call:
        """The same call on another copy of the exported program's module (the layout probe)."""
        assert self.in_spec is not None
        return Pt2Call(_structured(module, self.in_spec), *self.leaf_maps, self.out_spec)


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
        if self.aoti and self.settings.memory_format == "channels_last":
            names = channels_last_candidates(context.io)
            if names:
                raise invalid_arg(
                    f"model '{context.name}': {MEMORY_FORMAT_PARAMETER} channels_last cannot "
                    f"apply to an AOTInductor package (inputs {', '.join(sorted(names))}): its "
                    "compiled code reads its inputs with the strides they were exported with, "
                    "and other strides give wrong results, not an error; use auto or contiguous"
                )
        kind = "AOTInductor package" if self.aoti else "torch.export program"
        self.shared: SharedModules[Pt2Call] = SharedModules(self.settings.weight_sharing, kind)
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
        self.layout_chosen = False  # decided with the first instance

    def _load(self, placement: Placement) -> Pt2Call:
        device = placement.load_device
        module: torch.nn.Module | None = None
        try:
            if self.aoti:
                index = device.index if device is not None and device.type == "cuda" else -1
                package = torch._inductor.aoti_load_package(
                    str(self.path), device_index=-1 if index is None else index
                )
                loader = package.loader
                in_text, out_text = loader.get_call_spec()
                in_spec, out_spec = pytree.treespec_loads(in_text), pytree.treespec_loads(out_text)
                run: FlatRun = loader.boxed_run
            else:
                program = torch.export.load(str(self.path))
                in_spec, out_spec = program.call_spec.in_spec, program.call_spec.out_spec
                module = program.module()
                if device is not None:
                    module = module.to(device)
                run = _structured(module, in_spec)
        except Exception as exc:
            raise invalid_arg(
                f"model '{self.name}' version {self.context.version}: failed to load "
                f"'{self.path}': {first_line(exc)}"
            ) from None
        if in_spec is None or out_spec is None:
            raise invalid_arg(f"model '{self.name}': '{self.path}' has no call specification")
        io = self.context.io
        input_names = [s.name for s in io.model_inputs]
        output_names = [s.name for s in io.model_outputs]
        inputs = map_names(self.name, "input", input_names, in_spec, True)
        if inputs.leaves is None and len(input_names) != in_spec.num_leaves:
            raise invalid_arg(  # the original's sentence, then which names were tried
                f"unable to load model '{self.name}', configuration expects "
                f"{len(input_names)} inputs, model provides {in_spec.num_leaves}; the config's "
                "inputs go to the program in config order unless named INPUT__<n> or by "
                "their place in forward (ARGS[i], KWARGS[key], ...)"
            )
        outputs = map_names(self.name, "output", output_names, out_spec, False)
        log.info(
            "model '%s': inputs by %s, outputs by %s",
            self.name,
            inputs.convention,
            "the result's own names or positions" if outputs.leaves is None else outputs.convention,
        )
        return Pt2Call(run, inputs, outputs, output_names, out_spec, module, in_spec)

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        placement = placement_for(spec)
        with COMPILE_LOCK:
            call = self.shared.get(placement, spec.name, lambda: self._load(placement))
        if not self.layout_chosen:  # (outside the lock: the probe may take a second)
            obstacle = AOTI_LAYOUTS if self.aoti else None
            self.plan = choose_layout(self.plan, placement, call.module, call.with_module, obstacle)
            self.layout_chosen = True
        return TorchInstance(self.plan, spec.name, placement, call)

    def unload(self) -> None:
        self.shared.clear()


def _structured(module: Any, in_spec: pytree.TreeSpec) -> FlatRun:
    """An exported program's module as a function of its flat input leaves."""

    def run(flat: list[torch.Tensor]) -> list[torch.Tensor]:
        args, kwargs = pytree.tree_unflatten(flat, in_spec)
        leaves: list[torch.Tensor] = pytree.tree_flatten(module(*args, **kwargs))[0]
        return leaves

    return run
