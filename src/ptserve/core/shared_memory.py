"""System shared-memory regions that clients register to pass tensors without copying them
over the wire.

The core owns the registry so every frontend places tensors the same way: a region is a named
window (offset, byte_size) of a POSIX shared-memory object ``/dev/shm/<key>``; a tensor names a
region plus its own offset and size inside that window.
"""

from __future__ import annotations

import mmap
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from ptserve.common.errors import ServerError, Status, invalid_arg, not_found, unavailable
from ptserve.common.requests import Placement

SHM_ROOT = Path("/dev/shm")


CUDA_SHM_UNSUPPORTED = (
    "CUDA shared memory is not supported: this server runs on CPU only (no CUDA device)"
)

# Keys the reference keeps for its python backend's own regions.
RESERVED_PREFIX = "triton_python_backend_shm_region_"
_LARGEST_SIZE = 2**64 - 1  # offsets and sizes are unsigned 64-bit on the wire
DISABLED_MESSAGE = (
    "Client shared memory is disabled (system shared memory is off on this server; start it "
    "with --allow-client-shm=true to use it)"
)


@dataclass(frozen=True, slots=True)
class RegionStatus:
    """What a client registered, as the status calls report it."""

    name: str
    key: str
    offset: int
    byte_size: int


@dataclass(slots=True)
class _Region:
    status: RegionStatus
    mapping: mmap.mmap


class SharedMemoryRegistry:
    """Registered regions by name; every access is bounds-checked against the registration."""

    def __init__(self, enabled: bool, root: Path = SHM_ROOT) -> None:
        self.enabled = enabled
        self.root = root
        self._regions: dict[str, _Region] = {}
        self._lock = threading.Lock()

    def _require_enabled(self) -> None:
        if not self.enabled:
            raise unavailable(DISABLED_MESSAGE)

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the object ``key`` under ``name``."""
        self._require_enabled()
        if not name:
            raise invalid_arg("a shared memory region needs a non-empty name")
        if offset < 0 or byte_size < 0:
            raise invalid_arg(
                f"shared memory region '{name}': offset and byte_size must be non-negative"
            )
        path = self._path(name, key)
        with self._lock:
            if name in self._regions:
                raise ServerError(
                    Status.ALREADY_EXISTS,
                    f"shared memory region '{name}' already in manager (unregister it first)",
                )
            try:
                fd = os.open(path, os.O_RDWR)
            except OSError as exc:
                raise invalid_arg(
                    f"unable to open shared memory region '{name}' (key '{key}'): {exc.strerror}"
                ) from None
            try:
                size = os.fstat(fd).st_size
                if offset + byte_size > size:
                    raise invalid_arg(
                        f"failed to register shared memory region '{name}': invalid args "
                        f"(offset {offset} + byte_size {byte_size} exceeds the {size} bytes "
                        f"of key '{key}')"
                    )
                mapping = mmap.mmap(fd, size) if size else mmap.mmap(-1, 1)
            finally:
                os.close(fd)
            self._regions[name] = _Region(RegionStatus(name, key, offset, byte_size), mapping)

    def unregister(self, name: str = "") -> None:
        """Forget one region, or every region when ``name`` is empty; unknown names are no-ops."""
        self._require_enabled()
        self._release(name)

    def _release(self, name: str) -> None:
        with self._lock:
            names = [name] if name else list(self._regions)
            for each in names:
                region = self._regions.pop(each, None)
                if region is not None:
                    region.mapping.close()

    def status(self, name: str = "") -> list[RegionStatus]:
        """Every registered region, or the one called ``name`` (not found when unknown)."""
        with self._lock:
            if not name:
                return [r.status for _, r in sorted(self._regions.items())]
            region = self._regions.get(name)
        if region is None:
            raise not_found(f"unable to find system shared memory region: '{name}'")
        return [region.status]

    def read(self, where: str, place: Placement) -> bytes:
        """A copy of a tensor's bytes, so unregistering can never pull memory from under it."""
        with self._lock:
            region, start = self._window(where, place)
            return region.mapping[start : start + place.byte_size]

    def write(self, where: str, place: Placement, data: bytes | memoryview) -> None:
        """Store a tensor's bytes in its window; the window must be large enough."""
        if len(data) > place.byte_size:
            raise invalid_arg(
                f"{where}: the tensor needs {len(data)} bytes but shared memory region "
                f"'{place.region}' was given only shared_memory_byte_size {place.byte_size}"
            )
        with self._lock:
            region, start = self._window(where, place)
            region.mapping[start : start + len(data)] = data

    def close(self) -> None:
        self._release("")

    def _window(self, where: str, place: Placement) -> tuple[_Region, int]:
        self._require_enabled()
        region = self._regions.get(place.region)
        if region is None:
            raise not_found(
                f"{where}: unable to find system shared memory region: '{place.region}'"
            )
        registered = region.status
        offset, size = place.offset, place.byte_size
        if offset >= registered.byte_size and (offset or size):
            raise invalid_arg(
                f"Invalid offset for shared memory region: '{place.region}' ({where}: offset "
                f"{offset} is outside the region's {registered.byte_size} bytes)"
            )
        if offset + size > _LARGEST_SIZE:
            raise invalid_arg(
                f"Integer overflow detected: byte_size {size} + offset {offset} does not fit "
                f"in 64 bits ({where}, shared memory region '{place.region}')"
            )
        if offset + size > registered.byte_size:
            raise invalid_arg(
                f"Invalid offset + byte size for shared memory region: '{place.region}' "
                f"({where}: offset {offset} + byte_size {size} is outside the region's "
                f"{registered.byte_size} bytes)"
            )
        return region, registered.offset + place.offset

    def _path(self, name: str, key: str) -> Path:
        """The object a key names. Leading slashes are dropped, as ``shm_open`` drops them; the
        python backend's prefix is refused, as the reference refuses it."""
        stripped = key.lstrip("/")
        if not stripped or "/" in stripped or stripped in (".", ".."):
            raise invalid_arg(
                f"cannot register shared memory region '{name}' - invalid shm key '{key}' "
                "(expected a name like '/my_region')"
            )
        if stripped.startswith(RESERVED_PREFIX):
            raise invalid_arg(
                f"cannot register shared memory region '{name}' with key '{key}' as the key "
                f"contains the reserved prefix '{RESERVED_PREFIX}'"
            )
        return self.root / stripped
