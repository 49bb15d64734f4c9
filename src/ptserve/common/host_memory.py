"""Keeping freed host memory in the process, so that tensors are not mapped afresh per execution.

By default glibc's malloc maps every block above a (moving) threshold straight from the kernel
and unmaps it when freed, and hands the top of its heap back once 128 KiB of it are free. A
model's activations are such blocks: each execution then maps them again and touches every page
anew, and the page faults cost a CNN at batch 32 about a sixth of its time. Serving wants the
memory kept, as a caching allocator would: a server's resident memory stays at its peak.
"""

from __future__ import annotations

import ctypes
import logging
import platform

log = logging.getLogger("ptserve.common.host_memory")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest allowed value on 64-bit systems
TRIM_THRESHOLD = 1024 * 1024 * 1024


def retain_freed_memory() -> bool:
    """Serve blocks under 32 MiB from malloc's heaps and keep up to 1 GiB of freed memory.

    Call before models load; False where the C library is not glibc (nothing changes then).
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    if not applied:
        log.warning("the C library refused the host memory settings; freed memory is returned")
    return applied
