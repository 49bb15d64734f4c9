"""Direct runs on the event loop, through the real server: fast executions may run there,
slow ones never, and one instance still runs one execution at a time."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scheduling.helpers import Background, probe, stats, write_probe
from tests.serverproc import ServerProcess

ONE_CPU = "instance_group [ { count: 1 kind: KIND_CPU } ]"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("direct")
    write_probe(repo, "fast", ONE_CPU)
    write_probe(repo, "slow", ONE_CPU)
    with ServerProcess([repo]) as running:
        yield running


def test_fast_requests_from_many_clients_run_one_at_a_time_on_the_instance(
    server: ServerProcess,
) -> None:
    calls = Background()
    for tag in range(160):
        calls.start(lambda tag=tag: probe(server.http_url, "fast", tag=float(tag)))
    outcomes = calls.results()
    # Every answer is its own request's, and the instance counted each execution once: two
    # executions overlapping on the instance (loop and worker at once) would repeat a count.
    assert sorted(int(o.output[0, 1]) for o in outcomes) == list(range(160))
    assert sorted(int(o.output[0, 2]) for o in outcomes) == list(range(1, 161))
    entry = stats(server.http_url, "fast")
    assert entry["execution_count"] == 160
    assert entry["inference_stats"]["success"]["count"] == 160


def test_a_slow_model_never_holds_up_the_event_loop(
    server: ServerProcess, spins_per_second: float
) -> None:
    spins = max(1, int(spins_per_second * 0.6))
    first = probe(server.http_url, "slow", spins=spins)  # measured on the worker: 0.6 s
    assert first.error is None
    running = Background()
    running.start(lambda: probe(server.http_url, "slow", spins=spins))
    time.sleep(0.15)  # the second execution is under way
    waits = []
    for _ in range(5):
        started = time.monotonic()
        with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready", timeout=10):
            pass
        waits.append(time.monotonic() - started)
        time.sleep(0.02)
    [second] = running.results()
    assert second.error is None
    # Had the slow execution run on the event loop, a health check would wait for it (~0.6 s).
    assert second.done - second.sent > 0.4
    assert max(waits) < 0.3, waits
