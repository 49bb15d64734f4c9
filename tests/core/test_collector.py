"""Settling the heap: long-lived objects leave the collector's passes, garbage never stays."""

from __future__ import annotations

import gc
import re
import urllib.request
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from ptserve.backends.pytorch.backend import PyTorchBackend
from ptserve.core import collector
from ptserve.core.manager import LoadOptions, ModelManager
from ptserve.examples import SIMPLE_CONFIG, AddSub, write_model
from tests.serverproc import ServerProcess


class Node:
    """A reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def tracked(obj: object) -> bool:
    """Whether the collector's passes still walk ``obj`` (frozen objects are not listed)."""
    return any(o is obj for o in gc.get_objects())


@pytest.fixture
def settling() -> Iterator[None]:
    collector.enable()
    try:
        yield
    finally:
        collector.enable(False)  # and every frozen object back to the collector


def test_settle_does_nothing_unless_enabled() -> None:
    kept = Node()
    collector.settle()
    assert gc.get_freeze_count() == 0
    assert tracked(kept)


def test_settle_freezes_what_lives_and_frees_what_does_not(settling: None) -> None:
    kept = Node()
    dropped = Node()
    gone = weakref.ref(dropped)
    del dropped
    collector.settle()
    assert gone() is None  # collected first, never frozen
    assert gc.get_freeze_count() > 0
    assert not tracked(kept)


def test_a_cycle_frozen_earlier_is_freed_by_the_next_settle(settling: None) -> None:
    """What an unload leaves: objects frozen while the model served, garbage afterwards."""
    held = Node()
    collector.settle()
    gone = weakref.ref(held)
    del held
    gc.collect()
    assert gone() is not None  # frozen: a full pass does not see it
    collector.settle()
    assert gone() is None


def test_stopping_hands_frozen_objects_back() -> None:
    collector.enable()
    kept = Node()
    collector.settle()
    assert not tracked(kept)
    collector.enable(False)
    assert gc.get_freeze_count() == 0
    assert tracked(kept)


def test_loading_and_unloading_a_model_settle(settling: None, tmp_path: Path) -> None:
    write_model(tmp_path, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    manager = ModelManager([PyTorchBackend()], LoadOptions())
    model = manager.load("simple", tmp_path / "simple")
    assert not tracked(model)  # loaded, so frozen with the rest
    # Garbage an unload leaves behind: frozen while the model served, dropped since.
    leftover = Node()
    collector.settle()
    gone = weakref.ref(leftover)
    del leftover
    manager.unload("simple", forget=True)
    assert gone() is None


def test_the_server_settles_after_each_load_and_unload(tmp_path: Path) -> None:
    write_model(tmp_path, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    args = ["--log-verbose=1", "--model-control-mode=explicit", "--load-model=simple"]
    with ServerProcess([tmp_path], args) as server:
        url = f"http://{server.http_url}/v2/repository/models/simple/unload"
        with urllib.request.urlopen(urllib.request.Request(url, data=b"{}")) as reply:
            assert reply.status == 200
        settled = re.findall(
            r"collector: \d+ unreachable objects freed, (\d+) objects frozen", server.log()
        )
    assert len(settled) == 2  # the load, then the unload
    assert all(int(count) > 10_000 for count in settled)  # torch's and the model's objects
