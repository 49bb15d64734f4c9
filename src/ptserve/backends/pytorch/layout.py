"""The memory layout of image-like inputs: channels-last when it makes a model faster.

A model's result does not depend on the memory format of its inputs, only its speed does.
oneDNN's convolutions and torch's pooling have vectorised CPU kernels for channels-last (NHWC)
tensors, and a convolution passes the format on to what follows it; given the rows the wire
delivers (NCHW, contiguous), max pooling falls back to a scalar kernel that can cost more than
the convolutions around it. Only a 4-D floating-point input can take the format.

``INPUT_MEMORY_FORMAT`` decides, per model: ``contiguous`` keeps the inputs as they come;
``channels_last`` converts every 4-D floating-point input; ``auto`` (the default) asks the model
at load. Two private copies of the module run the same random batch, one per layout, and the
inputs go channels-last only when both give the same results (to float rounding) and
channels-last is clearly faster. The copies keep the probe from touching the served module's
state; the probe is skipped where it could not be representative or safe (a variable input
dimension, sequence batching, ragged or generated inputs, a device other than the CPU, a module
too large to copy) and for compiled code (torch.compile, AOTInductor), which has its own layouts
or was built for given ones. Should a channels-last batch fail later although the probe passed,
the runner runs it again contiguous and keeps that layout (``TorchInstance``).
"""

from __future__ import annotations

import copy
import dataclasses
import time
import warnings
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch

from ptserve.backends.pytorch.convert import TORCH_DTYPES
from ptserve.backends.pytorch.devices import Placement
from ptserve.backends.pytorch.runner import ModelCall, RunPlan, TorchInstance, zeros_request
from ptserve.backends.pytorch.settings import MEMORY_FORMAT_PARAMETER
from ptserve.common import logging_setup
from ptserve.common.datatypes import float32_to_bf16
from ptserve.common.errors import ServerError
from ptserve.common.iospec import ModelIO
from ptserve.common.prepared import OutputMap, PreparedRequest

M = TypeVar("M", bound=torch.nn.Module)

log = logging_setup.module_logger("ptserve.backends.pytorch", __file__)

# Copying an exported program's module copies its pytree specs, and torch 2.13 warns from
# copyreg about the deprecated class it rebuilds them with: torch's own concern, not the user's.
warnings.filterwarnings(
    "ignore", r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning, "copyreg"
)

# The datatypes whose tensors are floating point (FP16, FP32, FP64, BF16).
FLOAT_TYPES = frozenset(name for name, dtype in TORCH_DTYPES.items() if dtype.is_floating_point)

PROBE_MAX_BATCH = 4  # rows of the probe's batch (fewer when the model takes fewer)
PROBE_BUDGET_S = 1.0  # timed calls of both layouts together, after two warm-up calls each
PROBE_MAX_ROUNDS = 10
PROBE_MAX_BYTES = 512 << 20  # parameters and buffers of a module copied twice for the probe
FASTER = 0.85  # channels-last must take at most this share of the contiguous time


def channels_last_candidates(io: ModelIO) -> frozenset[str]:
    """The model inputs that reach the model 4-D (batch dimension included) and hold floats."""
    names: set[str] = set()
    for spec in io.inputs:
        rank = len(spec.model_dims) + (1 if io.batching else 0)
        if rank == 4 and spec.datatype.name in FLOAT_TYPES:
            names.add(spec.name)
    return frozenset(names)


def probe_obstacle(io: ModelIO, placement: Placement, module: torch.nn.Module) -> str | None:
    """Why ``auto`` cannot probe this model (None: it can)."""
    if placement.on_gpu or any(not t.is_cpu for t in module.parameters()):
        return "its instances run on a GPU; the probe runs on the CPU only"
    if io.sequence is not None or io.extra_inputs:
        return "sequence models keep state between calls"
    if io.batch_inputs or io.batch_outputs or any(s.allow_ragged_batch for s in io.inputs):
        return "ragged and generated inputs depend on the batch"
    for spec in io.inputs:
        if any(d < 0 for d in spec.model_dims):
            return f"input '{spec.name}' has a variable dimension"
    size = sum(t.numel() * t.element_size() for t in module.parameters())
    size += sum(t.numel() * t.element_size() for t in module.buffers())
    if size > PROBE_MAX_BYTES:
        return f"its {size >> 20} MiB of weights are too many to copy for the probe"
    return None


def faster(contiguous_ns: list[int], channels_last_ns: list[int]) -> bool:
    """Whether channels-last clearly wins: its fastest time within ``FASTER`` of contiguous's.

    The times are the probing thread's CPU time, so that waiting (for the GIL, for a core) does
    not count, and the fastest, not the median: other work on the machine (other models loading
    or compiling) only ever adds time, in bursts that can cover half the rounds of one layout."""
    return min(channels_last_ns) <= FASTER * min(contiguous_ns)


def same_results(first: OutputMap, second: OutputMap) -> bool:
    """Equal outputs, floats to rounding (the layouts sum in different orders)."""
    if first.keys() != second.keys():
        return False
    for name, a in first.items():
        b = second[name]
        if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind == "f":
            x, y = a.astype(np.float64), b.astype(np.float64)
            scale = max(1.0, float(np.abs(x).max(initial=0.0)))
            tolerance = 1e-2 if a.dtype.itemsize <= 2 else 1e-4
            if not np.allclose(x, y, rtol=tolerance, atol=tolerance * scale, equal_nan=True):
                return False
        elif not np.array_equal(a, b):
            return False
    return True


def probe_request(io: ModelIO, batch_size: int) -> PreparedRequest:
    """A batch of seeded random floats (zeros for the other types, "0" for strings)."""
    request = zeros_request(io, batch_size, 1)
    rng = np.random.default_rng(0)
    for spec in io.inputs:
        kind = spec.datatype.name
        if kind in FLOAT_TYPES:
            values = rng.standard_normal(request.inputs[spec.name].shape, dtype=np.float32)
            request.inputs[spec.name] = (
                float32_to_bf16(values) if kind == "BF16" else values.astype(spec.datatype.numpy)
            )
    return request


def choose_layout(
    plan: RunPlan,
    placement: Placement,
    module: M | None,
    method_of: Callable[[M], ModelCall],
    obstacle: str | None = None,
) -> RunPlan:
    """The plan with the inputs that go channels-last (see the module); logs the decision.
    ``method_of`` gives the callable to serve from a copy of ``module``; ``obstacle`` is the
    runtime's own reason not to probe (compiled code, which has no module to copy)."""
    mode = plan.settings.memory_format
    names = channels_last_candidates(plan.io)
    if not names or mode == "contiguous":
        return plan
    listed = ", ".join(sorted(names))
    if mode == "channels_last":
        log.info("model '%s': inputs %s reach the model channels-last", plan.model, listed)
        return dataclasses.replace(plan, channels_last=names)
    if module is not None and obstacle is None:
        obstacle = probe_obstacle(plan.io, placement, module)
    if module is None or obstacle is not None:
        log.info(
            "model '%s': inputs stay contiguous, the layout was not probed: %s (set %s to choose)",
            plan.model,
            obstacle or "the runtime has no module to probe",
            MEMORY_FORMAT_PARAMETER,
        )
        return plan
    started = time.monotonic()
    verdict, detail = _probe(plan, placement, module, method_of, names)
    log.info(
        "model '%s': inputs %s %s (%s; probed in %.2f s)",
        plan.model,
        listed,
        "reach the model channels-last" if verdict else "stay contiguous",
        detail,
        time.monotonic() - started,
    )
    return dataclasses.replace(plan, channels_last=names) if verdict else plan


def _probe(
    plan: RunPlan,
    placement: Placement,
    module: M,
    method_of: Callable[[M], ModelCall],
    names: frozenset[str],
) -> tuple[bool, str]:
    """Run both layouts on copies of the module; (channels-last wins, what was seen)."""
    batch_size = min(max(plan.io.max_batch_size, 1), PROBE_MAX_BATCH) if plan.io.batching else 1
    request = probe_request(plan.io, batch_size)
    try:
        copies = (copy.deepcopy(module), copy.deepcopy(module))
    except Exception as exc:  # a module holding what cannot be copied
        return False, f"the module cannot be copied for the probe: {exc}"
    contiguous = TorchInstance(plan, "layout-probe", placement, method_of(copies[0]), probe=True)
    changed = dataclasses.replace(plan, channels_last=names)
    channels_last = TorchInstance(
        changed, "layout-probe", placement, method_of(copies[1]), probe=True
    )
    first = contiguous.execute([request]).results[0]
    if isinstance(first, ServerError):
        return False, f"the model fails on a random batch: {first.message}"
    second = channels_last.execute([request]).results[0]
    if isinstance(second, ServerError):
        return False, f"channels-last inputs fail: {second.message}"
    if not same_results(first, second):
        return False, "channels-last inputs give different results"
    # One more untimed call each: TorchScript optimises a graph on its second call.
    contiguous.execute([request])
    tried = time.perf_counter_ns()
    channels_last.execute([request])
    took = time.perf_counter_ns() - tried
    rounds = max(1, min(PROBE_MAX_ROUNDS, int(PROBE_BUDGET_S * 1e9 / max(2 * took, 1))))
    times: tuple[list[int], list[int]] = ([], [])
    for _ in range(rounds):
        for instance, spent in zip((contiguous, channels_last), times, strict=True):
            start = time.thread_time_ns()
            result = instance.execute([request]).results[0]
            spent.append(time.thread_time_ns() - start)
            if isinstance(result, ServerError):
                return False, f"the model failed during the probe: {result.message}"
    before, after = min(times[0]), min(times[1])
    detail = (
        f"a batch of {batch_size} took {before / 1e6:.3f} ms contiguous, "
        f"{after / 1e6:.3f} ms channels-last, fastest of {rounds} in CPU time"
    )
    return faster(*times), detail
