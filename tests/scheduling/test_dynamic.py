"""The dynamic batcher through the real server: batches, delays, priorities, policies, order."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ptserve.examples import write_model
from tests.scheduling import models
from tests.scheduling.helpers import (
    Background,
    assert_stats_add_up,
    batch_histogram,
    probe,
    stats,
    write_probe,
)
from tests.serverproc import ServerProcess

ONE_CPU = "instance_group [ { count: 1 kind: KIND_CPU } ]"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("dynamic")
    write_probe(
        repo, "full8", f"{ONE_CPU} dynamic_batching {{ max_queue_delay_microseconds: 5000000 }}"
    )
    write_probe(
        repo,
        "preferred",
        f"{ONE_CPU} dynamic_batching {{ preferred_batch_size: [ 4 ] "
        "max_queue_delay_microseconds: 400000 }",
    )
    write_probe(repo, "nodelay", f"{ONE_CPU} dynamic_batching {{ }}")
    write_probe(
        repo,
        "prio",
        f"{ONE_CPU} dynamic_batching {{ priority_levels: 2 default_priority_level: 2 }}",
        max_batch_size=1,
    )
    write_probe(
        repo,
        "reject",
        f"""{ONE_CPU} dynamic_batching {{ default_queue_policy {{ timeout_action: REJECT
            default_timeout_microseconds: 300000 allow_timeout_override: true }} }}""",
        max_batch_size=1,
    )
    write_probe(
        repo,
        "delay",
        f"""{ONE_CPU} dynamic_batching {{ default_queue_policy {{ timeout_action: DELAY
            allow_timeout_override: true }} }}""",
        max_batch_size=1,
    )
    write_probe(
        repo,
        "small_queue",
        f"{ONE_CPU} dynamic_batching {{ default_queue_policy {{ max_queue_size: 2 }} }}",
        max_batch_size=1,
    )
    two = "instance_group [ { count: 2 kind: KIND_CPU } ]"
    write_probe(repo, "ordered", f"{two} dynamic_batching {{ preserve_ordering: true }}", 1)
    write_probe(repo, "unordered", f"{two} dynamic_batching {{ }}", 1)
    write_probe(
        repo,
        "groups",
        "instance_group [ { count: 2 kind: KIND_CPU }, { count: 1 kind: KIND_CPU } ]",
        max_batch_size=1,
    )
    write_model(
        repo,
        "shapes",
        """
        name: "shapes"
        platform: "pytorch_libtorch"
        max_batch_size: 8
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
        instance_group [ { count: 1 kind: KIND_CPU } ]
        dynamic_batching { max_queue_delay_microseconds: 400000 }
        """,
        {1: models.script(models.ShapeProbe())},
    )
    with ServerProcess([repo]) as process:
        yield process


def _busy(server: ServerProcess, model: str, seconds: float, rate: float, jobs: Background) -> None:
    """Occupy the model's single instance for about ``seconds``."""
    jobs.start(lambda: probe(server.http_url, model, tag=-1, spins=int(seconds * rate)))
    time.sleep(0.15)  # let the worker take it


def test_full_batch_forms_at_once_and_stats_agree(server: ServerProcess) -> None:
    jobs = Background()
    started = time.monotonic()
    for tag in range(8):
        jobs.start(lambda tag=tag: probe(server.http_url, "full8", tag=tag))
    outcomes = jobs.results()
    elapsed = time.monotonic() - started
    assert [o.batch_size for o in outcomes] == [8] * 8
    assert sorted(float(o.output[0, 1]) for o in outcomes if o.output is not None) == list(range(8))
    assert elapsed < 4.0, "a full batch must not wait for the 5 s queue delay"
    entry = stats(server.http_url, "full8")
    assert batch_histogram(entry) == {8: 1}
    assert entry["inference_count"] == 8 and entry["execution_count"] == 1
    assert entry["inference_stats"]["success"]["count"] == 8
    assert_stats_add_up(entry)


def test_preferred_size_goes_first_and_the_rest_after_the_delay(server: ServerProcess) -> None:
    jobs = Background()
    for tag in range(6):
        jobs.start(lambda tag=tag: probe(server.http_url, "preferred", tag=tag))
    outcomes = jobs.results()
    sizes = sorted(o.batch_size for o in outcomes)
    assert sizes == [2, 2, 4, 4, 4, 4]
    late = [o for o in outcomes if o.batch_size == 2]
    for outcome in late:  # they waited out the 0.4 s queue delay, and not much longer
        assert 0.3 <= outcome.done - outcome.sent < 3.0
    assert batch_histogram(stats(server.http_url, "preferred")) == {2: 1, 4: 1}


def test_lone_request_waits_at_most_the_queue_delay(server: ServerProcess) -> None:
    outcome = probe(server.http_url, "preferred", tag=1)
    assert outcome.batch_size == 1
    assert 0.35 <= outcome.done - outcome.sent < 3.0


def test_no_delay_runs_at_once_and_batches_what_queued(
    server: ServerProcess, spins_per_second: float
) -> None:
    jobs = Background()
    _busy(server, "nodelay", 0.8, spins_per_second, jobs)
    for tag in range(5):
        jobs.start(lambda tag=tag: probe(server.http_url, "nodelay", tag=tag))
    outcomes = jobs.results()
    # Those queued behind the busy instance ran together as soon as it was free.
    assert [o.batch_size for o in outcomes[1:]] == [5] * 5
    assert_stats_add_up(stats(server.http_url, "nodelay"))


def test_different_shapes_are_not_mixed(server: ServerProcess) -> None:
    import numpy as np
    import tritonclient.http as httpclient

    def send(length: int) -> int:
        client = httpclient.InferenceServerClient(server.http_url)
        tensor = httpclient.InferInput("INPUT0", [1, length], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, length), dtype=np.float32))
        try:
            return int(client.infer("shapes", [tensor]).as_numpy("OUTPUT0")[0, 0])
        finally:
            client.close()

    jobs = Background()
    for index in range(8):
        jobs.start(lambda index=index: send(3 if index % 2 else 5))
    sizes = jobs.results()
    assert all(size <= 4 for size in sizes), sizes
    assert stats(server.http_url, "shapes")["execution_count"] >= 2


def test_higher_priority_overtakes(server: ServerProcess, spins_per_second: float) -> None:
    jobs = Background()
    _busy(server, "prio", 1.0, spins_per_second, jobs)
    for tag in (1, 2, 3):
        jobs.start(lambda tag=tag: probe(server.http_url, "prio", tag=tag))
        time.sleep(0.05)
    jobs.start(lambda: probe(server.http_url, "prio", tag=9, priority=1))
    outcomes = jobs.results()[1:]
    order = [o.tag for o in sorted(outcomes, key=lambda o: float(o.output[0, 2]))]  # type: ignore[index]
    assert order == [9, 1, 2, 3]


def test_queue_timeout_rejects_with_503(server: ServerProcess, spins_per_second: float) -> None:
    jobs = Background()
    _busy(server, "reject", 1.5, spins_per_second, jobs)
    jobs.start(lambda: probe(server.http_url, "reject", tag=1))  # the default 0.3 s timeout
    jobs.start(lambda: probe(server.http_url, "reject", tag=2, timeout=100_000))  # shorter
    jobs.start(lambda: probe(server.http_url, "reject", tag=3, timeout=10_000_000))  # capped
    busy, default, short, capped = jobs.results()
    assert busy.error is None
    for outcome, limit in ((default, 0.3), (short, 0.1), (capped, 0.3)):
        assert outcome.error is not None
        assert outcome.error.status() == "503"
        assert "Request timeout expired" in outcome.error.message()
        assert limit * 0.8 <= outcome.done - outcome.sent < limit + 1.0
    entry = stats(server.http_url, "reject")
    assert entry["inference_stats"]["fail"]["count"] == 3


def test_delay_action_moves_timed_out_requests_back(
    server: ServerProcess, spins_per_second: float
) -> None:
    jobs = Background()
    _busy(server, "delay", 1.0, spins_per_second, jobs)
    jobs.start(lambda: probe(server.http_url, "delay", tag=1, timeout=100_000))
    time.sleep(0.05)
    jobs.start(lambda: probe(server.http_url, "delay", tag=2))
    outcomes = jobs.results()[1:]
    assert all(o.error is None for o in outcomes)
    first, second = sorted(outcomes, key=lambda o: float(o.output[0, 2]))  # type: ignore[index]
    assert (first.tag, second.tag) == (2, 1)


def test_full_queue_rejects_with_503(server: ServerProcess, spins_per_second: float) -> None:
    jobs = Background()
    _busy(server, "small_queue", 1.0, spins_per_second, jobs)
    for tag in (1, 2):
        jobs.start(lambda tag=tag: probe(server.http_url, "small_queue", tag=tag))
    time.sleep(0.15)
    rejected = probe(server.http_url, "small_queue", tag=3)
    assert rejected.error is not None and rejected.error.status() == "503"
    assert "Exceeds maximum queue size" in rejected.error.message()
    assert all(o.error is None for o in jobs.results())


@pytest.mark.parametrize(("model", "ordered"), [("ordered", True), ("unordered", False)])
def test_preserve_ordering(
    server: ServerProcess, spins_per_second: float, model: str, ordered: bool
) -> None:
    jobs = Background()
    jobs.start(lambda: probe(server.http_url, model, tag=1, spins=int(0.8 * spins_per_second)))
    time.sleep(0.15)
    jobs.start(lambda: probe(server.http_url, model, tag=2))
    slow, fast = jobs.results()
    assert slow.error is None and fast.error is None
    # The fast one ran on the second instance at once; with ordering its answer waited.
    # (Two client threads may see two answers sent together in either order: allow 50 ms.)
    if ordered:
        assert fast.done >= slow.done - 0.05
        assert fast.done - fast.sent > 0.3
    else:
        assert fast.done < slow.done - 0.2


def test_instance_groups_run_side_by_side(server: ServerProcess, spins_per_second: float) -> None:
    jobs = Background()
    for tag in range(3):
        jobs.start(
            lambda tag=tag: probe(
                server.http_url, "groups", tag=tag, spins=int(0.5 * spins_per_second)
            )
        )
    outcomes = jobs.results()
    # Each instance keeps its own call counter: three first calls mean three instances ran.
    assert [float(o.output[0, 2]) for o in outcomes] == [1.0, 1.0, 1.0]  # type: ignore[index]


def test_bad_scheduling_parameters_are_400(server: ServerProcess) -> None:
    # tritonclient refuses these itself, so they go as raw JSON.
    for params, name in (
        ({"priority": -1}, "priority"),
        ({"timeout": "soon"}, "timeout"),
        ({"sequence_id": 1.5}, "sequence_id"),
        ({"sequence_id": -4}, "sequence_id"),
        ({"sequence_start": 1, "sequence_id": 3}, "sequence_start"),
    ):
        body = {
            "parameters": params,
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [0, 0]}],
        }
        request = urllib.request.Request(
            f"http://{server.http_url}/v2/models/nodelay/infer",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == 400, params
        assert f"'{name}'" in json.loads(caught.value.read())["error"]


def test_statistics_have_the_reference_shape(server: ServerProcess) -> None:
    probe(server.http_url, "nodelay", tag=1)
    fields = {"success", "fail", "queue", "compute_input", "compute_infer", "compute_output"}
    fields |= {"cache_hit", "cache_miss"}
    for path in (
        "/v2/models/stats",
        "/v2/models/nodelay/stats",
        "/v2/models/nodelay/versions/1/stats",
    ):
        with urllib.request.urlopen(f"http://{server.http_url}{path}", timeout=10) as reply:
            body = json.loads(reply.read())
        entries = [e for e in body["model_stats"] if e["name"] == "nodelay"]
        assert len(entries) == 1, path
        entry = entries[0]
        assert entry["version"] == "1" and entry["last_inference"] > 0
        assert set(entry["inference_stats"]) == fields
        for value in entry["inference_stats"].values():
            assert set(value) == {"count", "ns"}
        for batch in entry["batch_stats"]:
            assert set(batch) == {"batch_size", "compute_input", "compute_infer", "compute_output"}
        assert_stats_add_up(entry)
