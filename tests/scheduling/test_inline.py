"""Inline executions on the event loop, through the real server: fast executions may run there,
slow ones never, one instance still runs one execution at a time, and the model's
``MAX_INLINE_EXECUTION_US`` decides what counts as fast (0: nothing)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scheduling.helpers import Background, probe, stats, write_probe
from tests.serverproc import ServerProcess

ONE_CPU = "instance_group [ { count: 1 kind: KIND_CPU } ]"


def inline_limit(microseconds: int) -> str:
    return (
        f'{ONE_CPU} parameters {{ key: "MAX_INLINE_EXECUTION_US" '
        f'value: {{ string_value: "{microseconds}" }} }}'
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("inline")
    write_probe(repo, "fast", ONE_CPU)
    write_probe(repo, "slow", ONE_CPU)
    write_probe(repo, "slow_inline", inline_limit(5_000_000))  # 0.6 s executions count as short
    write_probe(repo, "never_inline", inline_limit(0))
    with ServerProcess([repo]) as running:
        yield running


def health_waits_during_second_execution(
    server: ServerProcess, model: str, spins: int
) -> tuple[list[float], float]:
    """Run ``model`` twice (the first measures it); while the second runs, time five health
    checks. Returns their waits and how long the second execution took.

    The second is sized from the first to take ~0.8 s (``spins`` is the test process's estimate
    of 0.6 s): the server's TorchScript may spin faster than the calibration did, and its second
    run faster than its first, so the tests' "over 0.4 s" keeps a margin."""
    first = probe(server.http_url, model, spins=spins)
    assert first.error is None
    spins = max(1, int(spins * 0.8 / max(first.done - first.sent, 1e-3)))
    running = Background()
    running.start(lambda: probe(server.http_url, model, spins=spins))
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
    return waits, second.done - second.sent


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
    waits, took = health_waits_during_second_execution(
        server, "slow", max(1, int(spins_per_second * 0.6))
    )
    # Had the slow execution run on the event loop, a health check would wait for it (~0.6 s).
    assert took > 0.4
    assert max(waits) < 0.3, waits


def test_the_model_parameter_sets_what_runs_inline(
    server: ServerProcess, spins_per_second: float
) -> None:
    spins = max(1, int(spins_per_second * 0.6))
    waits, took = health_waits_during_second_execution(server, "slow_inline", spins)
    assert took > 0.4
    # Under its 5 s limit the execution ran on the event loop: a health check waited for it.
    assert max(waits) > 0.2, waits


def test_the_model_parameter_turns_inline_runs_off(server: ServerProcess) -> None:
    """With MAX_INLINE_EXECUTION_US 0 even the fastest executions go to the worker thread,
    which the statistics show as time spent queued (a hand-off between threads), where an
    inline run is not queued at all."""

    def queued_ns(model: str) -> int:
        return int(stats(server.http_url, model)["inference_stats"]["queue"]["ns"])

    for model in ("never_inline", "fast"):
        for _ in range(40):  # the first executions are slow: their average must settle
            assert probe(server.http_url, model).error is None
    # Each model's mean queue time over 20 requests, the lowest of three rounds: one request
    # preempted between queueing and running (a loaded machine) must not decide the figure.
    per_request = {"never_inline": float("inf"), "fast": float("inf")}
    for _ in range(3):
        before = {model: queued_ns(model) for model in per_request}
        for _ in range(20):
            assert probe(server.http_url, "never_inline").error is None
            assert probe(server.http_url, "fast").error is None
        for model, earlier in before.items():
            per_request[model] = min(per_request[model], (queued_ns(model) - earlier) / 20)
    # A hand-off to a thread and its wake-up cost tens of microseconds; an inline run waits
    # only for the lines between queueing and running it.
    assert per_request["fast"] < 10_000, per_request
    assert per_request["never_inline"] > max(10_000, 2 * per_request["fast"]), per_request


def test_a_bad_parameter_fails_the_load(tmp_path: Path) -> None:
    write_probe(tmp_path, "bad", inline_limit(-1))
    with ServerProcess(
        [tmp_path], ["--exit-on-error=false", "--strict-readiness=false"]
    ) as running:
        index = json.loads(
            urllib.request.urlopen(
                urllib.request.Request(
                    f"http://{running.http_url}/v2/repository/index", method="POST"
                ),
                timeout=10,
            ).read()
        )
    [entry] = [e for e in index if e["name"] == "bad"]
    assert "MAX_INLINE_EXECUTION_US must be a whole number of microseconds" in entry["reason"]
