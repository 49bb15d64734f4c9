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


def young_passes(alive: int) -> int:
    """How many young-generation passes start while ``alive`` new tracked objects are kept."""
    passes = 0

    def count(phase: str, info: dict[str, int]) -> None:
        nonlocal passes
        passes += phase == "start" and info["generation"] == 0

    gc.collect(0)  # the young count starts from zero
    gc.callbacks.append(count)
    try:
        kept = [[] for _ in range(alive)]
    finally:
        gc.callbacks.remove(count)
    del kept
    return passes


def test_the_requests_in_flight_start_no_young_pass(settling: None) -> None:
    """About 1,000 objects: what 32 requests in flight hold."""
    assert gc.get_threshold()[0] == collector.YOUNG_THRESHOLD
    assert young_passes(1_200) == 0
    assert young_passes(3 * collector.YOUNG_THRESHOLD) >= 1  # raised, not turned off


def test_stopping_restores_the_thresholds() -> None:
    before = gc.get_threshold()
    collector.enable()
    collector.enable()  # twice: the first call's thresholds are the ones kept
    collector.enable(False)
    assert gc.get_threshold() == before
    assert young_passes(1_200) >= 1  # Python's default (700) again


def test_a_collector_turned_off_stays_off() -> None:
    before = gc.get_threshold()
    gc.set_threshold(0)
    try:
        collector.enable()
        assert gc.get_threshold()[0] == 0
        collector.enable(False)
    finally:
        gc.set_threshold(*before)


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
            r"collector: \d+ unreachable objects freed, (\d+) objects frozen, in [\d.]+ ms "
            r"\(young-generation threshold (\d+)\)",
            server.log(),
        )
    assert len(settled) == 2  # the load, then the unload
    assert all(int(count) > 10_000 for count, _ in settled)  # torch's and the model's objects
    assert all(int(young) == collector.YOUNG_THRESHOLD for _, young in settled)
