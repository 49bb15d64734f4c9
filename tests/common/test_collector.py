"""The serving process's collector thresholds."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from ptserve.common import collector


@pytest.fixture
def thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


@pytest.mark.usefixtures("thresholds")
def test_space_out_collections_raises_the_young_threshold() -> None:
    gc.set_threshold(700, 10, 10)
    assert collector.space_out_collections() == (10_000, 10, 10)
    assert gc.get_threshold() == (10_000, 10, 10)


@pytest.mark.usefixtures("thresholds")
def test_fewer_young_collections_per_allocation() -> None:
    """What the setting is for: requests that each leave a few objects in reference cycles
    (only the collector frees those, and they count towards its threshold) trigger far fewer
    collections."""

    def collections(threshold: int) -> int:
        gc.set_threshold(threshold, 10, 10)
        before = gc.get_stats()[0]["collections"]
        for _ in range(20_000):
            request: dict[str, object] = {"inputs": [[1, 2], [3, 4]], "parameters": {}}
            request["self"] = request  # a cycle, as a coroutine and its task make
            del request
        return int(gc.get_stats()[0]["collections"] - before)

    default = collections(700)
    collector.space_out_collections()
    spaced = collections(collector.YOUNG_THRESHOLD)
    assert default > 5 * max(spaced, 1)
