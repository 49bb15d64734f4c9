"""The core's system shared-memory registry, on files of a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptserve.common.errors import ServerError, Status
from ptserve.common.requests import Placement
from ptserve.core.shared_memory import RESERVED_PREFIX, SharedMemoryRegistry


@pytest.fixture()
def registry(tmp_path: Path) -> SharedMemoryRegistry:
    (tmp_path / "data").write_bytes(bytes(range(32)))
    return SharedMemoryRegistry(True, root=tmp_path)


def _status(error: pytest.ExceptionInfo[ServerError]) -> Status:
    return error.value.status


def test_read_and_write_inside_the_window(registry: SharedMemoryRegistry, tmp_path: Path) -> None:
    registry.register("r", "/data", 8, 16)
    assert registry.read("input 'x'", Placement("r", 4, 2)) == bytes([10, 11, 12, 13])
    registry.write("output 'y'", Placement("r", 4, 12), b"\xff\xfe")
    assert (tmp_path / "data").read_bytes()[20:23] == b"\xff\xfe\x16"
    assert [s.name for s in registry.status()] == ["r"]


def test_bounds_and_unknown_regions(registry: SharedMemoryRegistry) -> None:
    registry.register("r", "data", 0, 8)
    with pytest.raises(ServerError) as error:
        registry.read("input 'x'", Placement("r", 8, 4))
    assert _status(error) is Status.INVALID_ARGUMENT
    assert error.value.message.startswith(
        "Invalid offset + byte size for shared memory region: 'r'"
    )
    assert "offset 4 + byte_size 8 is outside the region's 8 bytes" in error.value.message
    with pytest.raises(ServerError, match=r"^Invalid offset for shared memory region: 'r'"):
        registry.read("input 'x'", Placement("r", 1, 2**64 - 32))
    with pytest.raises(ServerError, match=r"^Integer overflow detected: byte_size "):
        registry.read("input 'x'", Placement("r", 2**64 - 4, 4))
    with pytest.raises(ServerError) as error:
        registry.write("output 'y'", Placement("r", 2), b"abc")
    assert "needs 3 bytes" in error.value.message
    with pytest.raises(ServerError) as error:
        registry.read("input 'x'", Placement("nope", 1))
    assert _status(error) is Status.NOT_FOUND
    with pytest.raises(ServerError) as error:
        registry.register("big", "data", 30, 8)
    assert error.value.message.startswith(
        "failed to register shared memory region 'big': invalid args"
    )
    assert "exceeds the 32 bytes" in error.value.message
    with pytest.raises(ServerError) as error:
        registry.register("r", "data", 0, 8)
    assert _status(error) is Status.ALREADY_EXISTS
    assert "shared memory region 'r' already in manager" in error.value.message
    with pytest.raises(ServerError) as error:
        registry.register("bad", "../etc/passwd", 0, 8)
    assert "invalid shm key" in error.value.message
    registry.unregister("r")
    registry.unregister("r")  # unknown names are a no-op, like the reference
    assert registry.status() == []


def test_disabled_registry_refuses(tmp_path: Path) -> None:
    registry = SharedMemoryRegistry(False, root=tmp_path)
    with pytest.raises(ServerError) as error:
        registry.register("r", "data", 0, 8)
    assert _status(error) is Status.UNAVAILABLE
    assert error.value.message.startswith("Client shared memory is disabled")
    assert "--allow-client-shm" in error.value.message


def test_disabled_registry_refuses_unregistering(tmp_path: Path) -> None:
    registry = SharedMemoryRegistry(False, root=tmp_path)
    with pytest.raises(ServerError) as error:
        registry.unregister("r")
    assert error.value.message.startswith("Client shared memory is disabled")
    assert registry.status() == []
    registry.close()  # shutting down is not a client's unregistering


@pytest.mark.parametrize("key", ["/", "///", "a/b", "/..", ""])
def test_keys_that_name_no_object(registry: SharedMemoryRegistry, key: str) -> None:
    with pytest.raises(ServerError) as error:
        registry.register("r", key, 0, 8)
    assert _status(error) is Status.INVALID_ARGUMENT
    assert error.value.message.startswith(
        f"cannot register shared memory region 'r' - invalid shm key '{key}'"
    )


@pytest.mark.parametrize("slashes", ["", "/", "///"])
def test_the_python_backends_prefix_is_reserved(
    registry: SharedMemoryRegistry, tmp_path: Path, slashes: str
) -> None:
    (tmp_path / f"{RESERVED_PREFIX}x").write_bytes(bytes(16))
    key = f"{slashes}{RESERVED_PREFIX}x"
    with pytest.raises(ServerError) as error:
        registry.register("r", key, 0, 8)
    assert error.value.message == (
        f"cannot register shared memory region 'r' with key '{key}' as the key contains the "
        f"reserved prefix '{RESERVED_PREFIX}'"
    )


def test_leading_slashes_name_the_same_object(
    registry: SharedMemoryRegistry, tmp_path: Path
) -> None:
    (tmp_path / "data").write_bytes(bytes(range(16)))
    registry.register("r", "///data", 0, 16)
    assert registry.read("input", Placement("r", 4, 2)) == bytes([2, 3, 4, 5])
