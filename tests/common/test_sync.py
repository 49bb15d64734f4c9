"""The request path's condition variable keeps threading.Condition's protocol."""

from __future__ import annotations

import threading
import time

from ptserve.common.sync import Condition


def _waiting(cond: Condition, count: int) -> None:
    """Until ``count`` threads wait on ``cond``."""
    deadline = time.monotonic() + 10
    while True:
        with cond:
            if len(cond._waiters) >= count:
                return
        assert time.monotonic() < deadline, "the waiters never waited"
        time.sleep(0.001)


def test_wait_times_out_and_returns_false_with_the_lock_held() -> None:
    cond = Condition()
    with cond:
        started = time.monotonic()
        assert cond.wait(0.05) is False
        assert time.monotonic() - started >= 0.04
        assert cond._lock.locked()
        assert not cond._waiters  # a timed-out waiter leaves no trace
        assert cond.wait(0) is False


def test_notify_wakes_the_longest_waiting_one_at_a_time() -> None:
    cond = Condition()
    woken: list[int] = []

    def waiter(number: int) -> None:
        with cond:
            assert cond.wait(10) is True
            woken.append(number)

    threads = []
    for number in range(3):
        thread = threading.Thread(target=waiter, args=(number,))
        thread.start()
        threads.append(thread)
        _waiting(cond, number + 1)
    with cond:
        cond.notify()
    threads[0].join(10)
    assert woken == [0]
    with cond:
        cond.notify_all()
    for thread in threads:
        thread.join(10)
    assert sorted(woken) == [0, 1, 2] and woken[0] == 0
    assert not cond._waiters


def test_wait_for_returns_the_predicate_once_true_or_when_time_runs_out() -> None:
    cond = Condition()
    state = {"count": 0}

    def bump() -> None:
        for _ in range(3):
            time.sleep(0.01)
            with cond:
                state["count"] += 1
                cond.notify_all()

    thread = threading.Thread(target=bump)
    thread.start()
    with cond:
        assert cond.wait_for(lambda: state["count"] >= 3, 10) is True
    thread.join(10)
    with cond:
        started = time.monotonic()
        assert cond.wait_for(lambda: state["count"] > 3, 0.05) is False
        assert time.monotonic() - started >= 0.04


def test_a_notify_racing_timeouts_loses_no_waiter() -> None:
    """Many short waits against a stream of notifies: every waiter leaves the list, whether
    it was notified or timed out, and the lock is never left held."""
    cond = Condition()
    stop = threading.Event()

    def notifier() -> None:
        while not stop.is_set():
            with cond:
                cond.notify()

    thread = threading.Thread(target=notifier)
    thread.start()
    try:
        for _ in range(2000):
            with cond:
                cond.wait(0.0001)
    finally:
        stop.set()
        thread.join(10)
    with cond:
        assert not cond._waiters
    assert not cond._lock.locked()
