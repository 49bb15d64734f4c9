"""The dynamic batcher's batch-forming rule (BatchRule.choose), as the reference batcher forms
batches: the largest preferred size that can be reached goes at once, the delay otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from ptserve.common.prepared import PreparedRequest
from ptserve.scheduling.batching import BatchRule
from ptserve.scheduling.work import WorkItem

MS = 1_000_000
_LOOP = asyncio.new_event_loop()  # the items' futures are never awaited


def queue(*sizes: int, at_ns: int = 0, key: Hashable = "same") -> list[WorkItem]:
    items = []
    for size in sizes:
        item = WorkItem(PreparedRequest("", {}, size, ()), _LOOP)
        item.enqueue_ns, item.key = at_ns, key
        items.append(item)
    return items


def sizes(rule: BatchRule, items: list[WorkItem], now_ns: int = 1 * MS) -> tuple[list[int], int]:
    chosen, wait = rule.choose(items, now_ns)
    return [item.request.batch_size for item in chosen], wait


def test_a_request_that_is_a_preferred_size_goes_at_once() -> None:
    rule = BatchRule.make(8, [2, 6], 10_000_000)
    assert sizes(rule, queue(2)) == ([2], 0)


def test_the_largest_preferred_size_reached_goes_at_once() -> None:
    rule = BatchRule.make(8, [2, 6], 10_000_000)
    assert sizes(rule, queue(1, 1, 1)) == ([1, 1], 0)
    assert sizes(rule, queue(*[1] * 7)) == ([1] * 6, 0)


def test_short_of_a_preferred_size_it_waits_out_the_delay() -> None:
    rule = BatchRule.make(8, [2, 6], 10_000)  # 10 ms
    chosen, wait = sizes(rule, queue(1), now_ns=1 * MS)
    assert chosen == [] and wait == 9 * MS
    assert sizes(rule, queue(1), now_ns=10 * MS) == ([1], 0)


def test_between_preferred_sizes_it_waits_then_goes_whole() -> None:
    rule = BatchRule.make(8, [2, 6], 10_000)
    # 3 + 1 rows: no preferred size reached, and 6 still can be.
    assert sizes(rule, queue(3, 1))[0] == []
    assert sizes(rule, queue(3, 1), now_ns=11 * MS) == ([3, 1], 0)


def test_past_the_largest_preferred_size_the_reachable_part_goes() -> None:
    rule = BatchRule.make(8, [4], 10_000_000)
    # 3 rows, then a request of 2 would pass 4: no preferred size can be reached any more.
    assert sizes(rule, queue(3, 2)) == ([3], 0)


def test_after_the_delay_everything_that_fits_goes() -> None:
    rule = BatchRule.make(8, [2, 6], 10_000)
    assert sizes(rule, queue(*[1] * 9), now_ns=20 * MS) == ([1] * 8, 0)


def test_a_batch_that_cannot_grow_goes() -> None:
    rule = BatchRule.make(4, [4], 10_000_000)
    items = queue(1) + queue(1, key="other")
    assert sizes(rule, items) == ([1], 0)


def test_without_a_delay_what_is_queued_goes_at_once() -> None:
    rule = BatchRule.make(8, [4], 0)
    assert sizes(rule, queue(1, 1, 1)) == ([1, 1, 1], 0)
    assert sizes(rule, queue(*[1] * 5)) == ([1] * 4, 0)


def test_nothing_queued_waits_for_a_request() -> None:
    rule = BatchRule.make(8, [4], 1000)
    assert sizes(rule, []) == ([], -1)


def test_completes_says_when_a_waiting_worker_must_look_again() -> None:
    rule = BatchRule.make(8, [2, 6], 1000)
    assert [rows for rows in range(1, 9) if rule.completes(rows)] == [2, 6, 7, 8]
