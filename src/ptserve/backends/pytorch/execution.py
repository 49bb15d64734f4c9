"""What is set up around each execution on the thread that runs it: the size of torch's
intra-op pool and the grad mode.

Both run once per batch on the request path (for an unbatched model, once per request on the
event loop), so they are compiled and enter torch's own guards directly: ``torch.inference_mode()``
and ``torch.no_grad()`` are Python context managers of several interpreted calls each.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch

log = logging.getLogger("ptserve.backends.pytorch")

# torch.inference_mode(True) enters exactly this guard.
_INFERENCE_MODE: Callable[[], AbstractContextManager[Any]] = functools.partial(
    torch._C._InferenceMode, True
)


class PoolSizes(Protocol):
    """What a model asks of the pools (its ``Settings``)."""

    @property
    def intra_op_threads(self) -> int | None: ...

    @property
    def inter_op_threads(self) -> int | None: ...


class NoGrad:
    """``torch.no_grad()``: gradients off for the block, the previous mode restored after."""

    __slots__ = ("_previous",)

    def __init__(self) -> None:
        self._previous = False

    def __enter__(self) -> None:
        self._previous = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)

    def __exit__(self, *exc: object) -> None:
        torch._C._set_grad_enabled(self._previous)


def grad_scope(inference_mode: bool) -> Callable[[], AbstractContextManager[Any]]:
    """A factory of the grad-mode scope an execution runs in (``INFERENCE_MODE``)."""
    return _INFERENCE_MODE if inference_mode else NoGrad


class ThreadPools:
    """Torch's two thread pools: process-wide, so the first model to size one decides it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.initial_intra = torch.get_num_threads()
        self.intra: tuple[int, str] | None = None
        self.inter: tuple[int, str] | None = None
        self._local = threading.local()

    def claim(self, model: str, settings: PoolSizes) -> None:
        """Apply a model's explicit pool sizes, or warn that an earlier model's size stays."""
        with self._lock:
            if settings.intra_op_threads is not None:
                self.intra = self._claim_one("intra", self.intra, model, settings.intra_op_threads)
            if settings.inter_op_threads is not None:
                self.inter = self._claim_one("inter", self.inter, model, settings.inter_op_threads)

    def _claim_one(
        self, pool: str, current: tuple[int, str] | None, model: str, wanted: int
    ) -> tuple[int, str] | None:
        if current is not None:
            if current[0] != wanted:
                log.warning(
                    "model '%s' asks for %s-op thread count %d, but the %s-op pool is "
                    "process-wide and was already set to %d by model '%s'; keeping %d",
                    model,
                    pool,
                    wanted,
                    pool,
                    current[0],
                    current[1],
                    current[0],
                )
            return current
        if pool == "intra":
            torch.set_num_threads(wanted)
            return (wanted, model)
        try:
            torch.set_num_interop_threads(wanted)
        except RuntimeError as exc:
            log.warning(
                "model '%s' asks for inter-op thread count %d, but torch refused (%s); the "
                "inter-op pool keeps %d threads",
                model,
                wanted,
                str(exc).strip().splitlines()[0],
                torch.get_num_interop_threads(),
            )
            return (torch.get_num_interop_threads(), "torch")
        return (wanted, model)

    def enter_worker(self, runtime_default: int | None) -> None:
        """Size the intra-op pool of the calling thread for the model about to run on it.

        OpenMP keeps the size per thread, so each thread applies the process-wide value if a
        model set one, else the runtime's default (1 for the Python runtime). An instance
        thread serves one model, but the event loop runs short executions of any model
        (direct runs), so the size is set again whenever it differs from the thread's last.
        """
        if self.intra is not None:
            wanted = self.intra[0]
        elif runtime_default is not None:
            wanted = runtime_default
        else:
            wanted = self.initial_intra
        if getattr(self._local, "size", None) == wanted:
            return
        self._local.size = wanted
        if torch.get_num_threads() != wanted:
            torch.set_num_threads(wanted)


POOLS = ThreadPools()
