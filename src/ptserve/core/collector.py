"""What the cyclic garbage collector traverses in a serving process.

A loaded server holds a few hundred thousand tracked objects for good (torch's modules, the
models, configs, protobuf descriptors). Every full pass of the collector walks all of them,
tens of milliseconds with the GIL held, and in a busy server such passes come every few
seconds: the requests in flight at each younger pass are promoted to the oldest generation and
trigger the next full one. ``settle`` takes the long-lived objects out of those passes
(``gc.freeze``) each time the set of loaded models changes, after one full collection that frees
what the change left behind (an unloaded model's reference cycles, a load's temporaries), so
that nothing collectable is ever frozen. Frozen objects are still freed by reference counting.

Settling is process-wide: the server's entry point turns it on (``enable``); a process that
embeds the core keeps the collector as it is unless it does the same.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

log = logging.getLogger("ptserve.core")

_lock = threading.Lock()
_enabled = False


def enable(on: bool = True) -> None:
    """Settle from now on (``on``), or stop and hand every frozen object back to the collector."""
    global _enabled
    with _lock:
        _enabled = on
        if not on:
            gc.unfreeze()


def settle() -> None:
    """After models were loaded or unloaded: collect everything once, then freeze what is left.

    Runs on the thread that loaded or unloaded (the collection holds the GIL: a pause as long as
    one full pass, which a busy server would otherwise take every few seconds)."""
    if not _enabled:
        return
    with _lock:
        started = time.perf_counter()
        gc.unfreeze()  # what an unload left among the frozen objects becomes collectable again
        freed = gc.collect()
        gc.freeze()
        log.debug(
            "collector: %d unreachable objects freed, %d objects frozen, in %.1f ms",
            freed,
            gc.get_freeze_count(),
            (time.perf_counter() - started) * 1e3,
        )
