"""The reference's scheduler test hooks (TRITONSERVER_DELAY_SCHEDULER and the backlog one), and
the preferred-size rule through the real server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from ptserve.scheduling.hold import Hold
from tests.scheduling.helpers import Background, batch_histogram, probe, stats, write_probe
from tests.serverproc import ServerProcess

ONE_CPU = "instance_group [ { count: 1 kind: KIND_CPU } ]"


def test_a_hold_lasts_until_enough_requests_wait_then_never_again() -> None:
    hold = Hold(3)
    assert hold.holding(0) and hold.holding(2)
    assert not hold.holding(3)
    assert not hold.holding(0)


def test_a_hold_may_also_wait_for_backlogged_requests() -> None:
    hold = Hold(2, backlog=1)
    assert hold.holding(5, 0)
    assert not hold.holding(2, 1)


def test_no_hook_no_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONSERVER_DELAY_SCHEDULER", raising=False)
    assert not Hold.from_environment("m").holding(0)
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "three")
    assert not Hold.from_environment("m").holding(0)
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    monkeypatch.setenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", "2")
    assert Hold.from_environment("m").backlog == 0  # only the sequence batcher has a backlog
    assert Hold.from_environment("m", sequences=True).backlog == 2


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("hold")
    write_probe(repo, "nodelay", f"{ONE_CPU} dynamic_batching {{ }}")
    write_probe(
        repo,
        "preferred",
        f"{ONE_CPU} dynamic_batching {{ preferred_batch_size: [ 2, 6 ] "
        "max_queue_delay_microseconds: 10000000 }",
    )
    with ServerProcess([repo], env={"TRITONSERVER_DELAY_SCHEDULER": "3"}) as process:
        yield process


def test_the_delay_hook_holds_the_first_batch_until_enough_requests_queued(
    held: ServerProcess,
) -> None:
    jobs = Background()
    for tag in range(3):  # without the hook, each would run alone (no queue delay)
        jobs.start(lambda tag=tag: probe(held.http_url, "nodelay", tag=tag))
        time.sleep(0.2)
    outcomes = jobs.results()
    assert [o.batch_size for o in outcomes] == [3, 3, 3]
    assert outcomes[0].done - outcomes[0].sent >= 0.35
    # Then the batcher batches as usual: a lone request goes at once.
    assert probe(held.http_url, "nodelay", tag=9).batch_size == 1
    assert batch_histogram(stats(held.http_url, "nodelay")) == {3: 1, 1: 1}


def test_a_request_of_a_preferred_size_does_not_wait_for_the_delay(held: ServerProcess) -> None:
    jobs = Background()
    for tag in range(4):  # release the model's hook: four rows go as two batches of two
        jobs.start(lambda tag=tag: probe(held.http_url, "preferred", tag=tag))
    assert [o.batch_size for o in jobs.results()] == [2, 2, 2, 2]
    client = httpclient.InferenceServerClient(held.http_url)
    tensor = httpclient.InferInput("INPUT0", [2, 2], "FP32")
    tensor.set_data_from_numpy(np.zeros((2, 2), dtype=np.float32))
    started = time.monotonic()
    result = client.infer("preferred", [tensor])
    assert time.monotonic() - started < 5.0, "a batch of a preferred size must go at once"
    assert result.as_numpy("OUTPUT0")[0, 0] == 2
