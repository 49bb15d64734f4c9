"""What the cyclic garbage collector traverses in a serving process.

A loaded server holds a few hundred thousand tracked objects for good (torch's modules, the
models, configs, protobuf descriptors). Every full pass of the collector walks all of them,
tens of milliseconds with the GIL held, and in a busy server such passes come every few
seconds: the requests in flight at each younger pass are promoted to the oldest generation and
trigger the next full one. ``settle`` takes the long-lived objects out of those passes
(``gc.freeze``) each time the set of loaded models changes, after one full collection that frees
what the change left behind (an unloaded model's reference cycles, a load's temporaries), so
that nothing collectable is ever frozen. Frozen objects are still freed by reference counting.

The first generation's threshold is raised too (``YOUNG_THRESHOLD``). A young pass comes when
the tracked objects alive have grown by the threshold since the last one; the requests in flight
hold about 30 each, so at Python's default (700) a burst of a few dozen arrivals crosses it: a
pass of ~70 µs for nearly every batch, that frees nothing (the request path makes no cycles).

Both are process-wide: the server's entry point turns them on (``enable``); a process that
embeds the core keeps the collector as it is unless it does the same.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

log = logging.getLogger("ptserve.core")

# Above the objects that 32 requests in flight hold (about 1,000), so a burst of arrivals does
# not start a pass; reference cycles made by failures (an exception's traceback) wait for at
# most this many allocations, about three times Python's default.
YOUNG_THRESHOLD = 2000

_lock = threading.Lock()
_thresholds: tuple[int, int, int] | None = None  # the collector's own while enabled, else None


def enable(on: bool = True) -> None:
    """Settle from now on with the young threshold raised (``on``), or stop: the thresholds as
    they were, and every frozen object handed back to the collector."""
    global _thresholds
    with _lock:
        if on:
            if _thresholds is None:
                _thresholds = gc.get_threshold()
            young, middle, old = _thresholds
            if young:  # (0: the process turned the collector off; it stays off)
                gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)
        else:
            if _thresholds is not None:
                gc.set_threshold(*_thresholds)
                _thresholds = None
            gc.unfreeze()


def settle() -> None:
    """After models were loaded or unloaded: collect everything once, then freeze what is left.

    Runs on the thread that loaded or unloaded (the collection holds the GIL: a pause as long as
    one full pass, which a busy server would otherwise take every few seconds)."""
    if _thresholds is None:
        return
    with _lock:
        started = time.perf_counter()
        gc.unfreeze()  # what an unload left among the frozen objects becomes collectable again
        freed = gc.collect()
        gc.freeze()
        log.debug(
            "collector: %d unreachable objects freed, %d objects frozen, in %.1f ms "
            "(young-generation threshold %d)",
            freed,
            gc.get_freeze_count(),
            (time.perf_counter() - started) * 1e3,
            gc.get_threshold()[0],
        )
