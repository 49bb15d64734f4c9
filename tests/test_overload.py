"""Overload: a slow model offered several times the rate it can serve sheds the excess with 503
(full queue, or queue timeout), answers every request it accepted correctly, and keeps its
memory bounded; afterwards it answers promptly again.

The load is open-loop (requests leave at a fixed rate whatever the answers), so if shedding
broke, the queue, the latencies and the memory would grow for as long as the test runs.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.serverproc import ServerProcess

SLEEP_S = 0.04  # per batch
MAX_BATCH = 2
SUSTAINABLE = MAX_BATCH / SLEEP_S  # requests per second, at best
RATE = 6 * SUSTAINABLE  # offered
ROW = 65536  # FP32 elements per request: 256 KiB, so a queue that grows shows in memory
QUEUE_FULL = "Exceeds maximum queue size"
TIMEOUT_EXPIRED = "Request timeout expired"

SLOW = f"""
import time
from torch import nn

class Slow(nn.Module):
    def forward(self, x):
        time.sleep({SLEEP_S})
        return x * 2
"""


def _write(repo: Path, name: str, policy: str) -> None:
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(SLOW)
    (model_dir / "config.pbtxt").write_text(
        f'name: "{name}" backend: "pytorch" runtime: "model.py" max_batch_size: {MAX_BATCH}\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {ROW} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {ROW} ] }} ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        'parameters { key: "TORCH_COMPILE_OPTIONAL_PARAMETERS" '
        'value: { string_value: "{\\"disable\\": true}" } }\n'
        f"dynamic_batching {{ default_queue_policy {{ {policy} }} }}\n"
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("overload")
    _write(repo, "bounded", "max_queue_size: 8")
    _write(repo, "expiring", "timeout_action: REJECT default_timeout_microseconds: 100000")
    process = ServerProcess([repo], ["--allow-grpc=false", "--allow-metrics=false"]).start()
    yield process
    process.stop()


@dataclass
class Load:
    """What an open-loop run saw: answers by kind, latencies of the accepted, the server's RSS."""

    sent: int = 0
    correct: int = 0
    wrong: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # "<status> <message>" → count
    accepted_latency: list[float] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)
    seconds: float = 0.0


def _rss_kb(server: ServerProcess) -> int:
    assert server.process is not None
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def _hammer(server: ServerProcess, model: str, seconds: float) -> Load:
    """Send ``RATE`` requests per second for ``seconds``, each tagged so its answer is checked."""
    load = Load()
    client = aioclient.InferenceServerClient(server.http_url, conn_limit=1024)

    async def one(tag: int) -> None:
        data = np.full((1, ROW), float(tag % 100_000), dtype=np.float32)
        tensor = aioclient.InferInput("INPUT0", [1, ROW], "FP32")
        tensor.set_data_from_numpy(data)
        sent = time.monotonic()
        try:
            result = await client.infer(model, [tensor])
        except InferenceServerException as exc:
            key = f"{exc.status()} {exc.message()}"
            load.rejected[key] = load.rejected.get(key, 0) + 1
            return
        load.accepted_latency.append(time.monotonic() - sent)
        if np.array_equal(result.as_numpy("OUTPUT0"), data * 2):
            load.correct += 1
        else:
            load.wrong += 1

    async def watch_memory(stop: asyncio.Event) -> None:
        while not stop.is_set():
            load.rss_kb.append(_rss_kb(server))
            await asyncio.sleep(0.2)

    stop = asyncio.Event()
    watcher = asyncio.create_task(watch_memory(stop))
    tasks: list[asyncio.Task[None]] = []
    started = time.monotonic()
    try:
        while (now := time.monotonic()) < started + seconds:
            due = started + load.sent / RATE
            if due > now:
                await asyncio.sleep(due - now)
            tasks.append(asyncio.create_task(one(load.sent)))
            load.sent += 1
        load.seconds = time.monotonic() - started
        # Every request gets an answer: accepted ones within the bounded queue's wait.
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    finally:
        stop.set()
        await watcher
        await client.close()
    return load


def _stats(server: ServerProcess, model: str) -> dict[str, int]:
    url = f"http://{server.http_url}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as reply:
        [entry] = json.loads(reply.read())["model_stats"]
    inference = entry["inference_stats"]
    return {"success": inference["success"]["count"], "fail": inference["fail"]["count"]}


def _answers_promptly(server: ServerProcess, model: str) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        data = np.full((2, ROW), 3.0, dtype=np.float32)
        tensor = httpclient.InferInput("INPUT0", [2, ROW], "FP32")
        tensor.set_data_from_numpy(data)
        started = time.monotonic()
        result = client.infer(model, [tensor])
        assert time.monotonic() - started < 2.0
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
    finally:
        client.close()
    assert server.status("/v2/health/ready") == 200


def _check(load: Load, server: ServerProcess, before: dict[str, int], message: str) -> None:
    """Only correct answers and the expected 503; the server counted exactly what clients saw."""
    offered = load.sent / load.seconds
    assert offered >= 3 * SUSTAINABLE, f"the client offered only {offered:.0f} requests/s"
    assert set(load.rejected) == {f"503 {message}"}, load.rejected
    rejected = load.rejected[f"503 {message}"]
    assert load.wrong == 0
    assert load.correct + rejected == load.sent
    # At several times the sustainable rate most requests are shed; the accepted are at most
    # what the instance can run in that time (plus the queue it may drain at the end).
    assert rejected > load.correct
    assert load.correct <= SUSTAINABLE * (load.seconds + 2)
    after = _stats(server, "bounded" if message == QUEUE_FULL else "expiring")
    assert after["success"] - before["success"] == load.correct
    assert after["fail"] - before["fail"] == rejected


def test_a_full_queue_sheds_with_503_and_memory_stays_bounded(server: ServerProcess) -> None:
    asyncio.run(_hammer(server, "bounded", 1.5))  # warm-up: connections, buffers, allocator
    before = _stats(server, "bounded")
    baseline = _rss_kb(server)
    load = asyncio.run(_hammer(server, "bounded", 8.0))
    _check(load, server, before, QUEUE_FULL)
    # An accepted request waits for at most the 8 queued ahead of it (4 batches) and its own
    # run; without the limit the wait would grow by seconds per second of overload.
    worst = max(load.accepted_latency)
    assert worst < 1.5, f"an accepted request waited {worst:.2f} s"
    grown_mb = (max(load.rss_kb) - baseline) / 1024
    assert grown_mb < 100, f"RSS grew by {grown_mb:.0f} MB during the soak"
    _answers_promptly(server, "bounded")


def test_a_queue_timeout_sheds_with_503(server: ServerProcess) -> None:
    before = _stats(server, "expiring")
    load = asyncio.run(_hammer(server, "expiring", 4.0))
    _check(load, server, before, TIMEOUT_EXPIRED)
    # Queued for at most the 100 ms timeout, then one batch's run (on a busy machine: slack).
    worst = max(load.accepted_latency)
    assert worst < 1.5, f"an accepted request waited {worst:.2f} s"
    _answers_promptly(server, "expiring")
