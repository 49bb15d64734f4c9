"""Where an instance runs: its device, its CUDA stream, cache cleaning and shared modules."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from ptserve.backends.base import InstanceSpec
from ptserve.common.errors import invalid_arg

log = logging.getLogger("ptserve.backends.pytorch")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Placement:
    """An instance's devices: where the model is loaded and where its inputs go."""

    kind: str
    load_device: torch.device | None  # map location; None keeps the model's own placement
    input_device: torch.device  # where gathered inputs are put
    stream: torch.cuda.Stream | None = None

    @property
    def on_gpu(self) -> bool:
        return self.input_device.type == "cuda" or (
            self.kind == "KIND_MODEL" and torch.cuda.is_available()
        )

    def describe(self) -> str:
        where = str(self.load_device) if self.load_device is not None else "its own devices"
        return f"{self.kind}: model on {where}, inputs on {self.input_device}"


def placement_for(spec: InstanceSpec) -> Placement:
    """KIND_GPU → ``cuda:<id>`` with its own stream; KIND_CPU → cpu; KIND_MODEL → no moving."""
    kind = spec.kind
    if kind == "KIND_AUTO":
        kind = "KIND_GPU" if torch.cuda.is_available() else "KIND_CPU"
    if kind == "KIND_GPU":
        if not torch.cuda.is_available():
            raise invalid_arg(
                f"instance '{spec.name}' is KIND_GPU but no CUDA device is available; "
                "use KIND_CPU or KIND_AUTO"
            )
        index = max(spec.device_id, 0)
        if index >= torch.cuda.device_count():
            raise invalid_arg(
                f"instance '{spec.name}' asks for GPU {spec.device_id} but only "
                f"{torch.cuda.device_count()} are visible"
            )
        device = torch.device("cuda", index)
        stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        return Placement(kind, device, device, stream)
    cpu = torch.device("cpu")
    if kind == "KIND_MODEL":
        return Placement(kind, None, cpu)
    return Placement("KIND_CPU", cpu, cpu)


_NO_STREAM = contextlib.nullcontext()  # reusable: it holds nothing


def stream_scope(placement: Placement) -> contextlib.AbstractContextManager[object]:
    """Run on the instance's own CUDA stream, waiting for it before results are read."""
    if placement.stream is None:
        return _NO_STREAM
    return _on_stream(placement, placement.stream)


@contextlib.contextmanager
def _on_stream(placement: Placement, stream: torch.cuda.Stream) -> Iterator[None]:
    with torch.cuda.device(placement.input_device), torch.cuda.stream(stream):
        yield
    stream.synchronize()


def clean_cache(placement: Placement) -> None:
    """Hand cached CUDA blocks back after an execution (ENABLE_CACHE_CLEANING; GPU only)."""
    if placement.on_gpu:
        torch.cuda.empty_cache()


class SharedModules(Generic[T]):
    """One loaded module per device for the instances of a model version (weight sharing)."""

    def __init__(self, enabled: bool, label: str) -> None:
        self.enabled = enabled
        self.label = label
        self._lock = threading.Lock()
        self._modules: dict[str, T] = {}

    def get(self, placement: Placement, instance: str, load: Callable[[], T]) -> T:
        if not self.enabled:
            return load()
        key = str(placement.load_device)
        with self._lock:
            found = self._modules.get(key)
            if found is not None:
                log.info("Reusing %s for instance '%s'", self.label, instance)
                return found
            module = load()
            self._modules[key] = module
            return module

    def clear(self) -> None:
        with self._lock:
            self._modules.clear()
