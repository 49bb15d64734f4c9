"""Calling test models over HTTP from many threads, and reading their statistics."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from ptserve.examples import write_model
from tests.scheduling import models

PROBE_IO = """
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


def write_probe(repository: Path, name: str, settings: str, max_batch_size: int = 8) -> None:
    """A BatchProbe model with the given scheduling settings."""
    config = f"""
        name: "{name}"
        platform: "pytorch_libtorch"
        max_batch_size: {max_batch_size}
        {PROBE_IO}
        {settings}
    """
    write_model(repository, name, config, {1: models.script(models.BatchProbe())})


@dataclass
class Outcome:
    """One request's answer (or error) and when it came back."""

    tag: float
    output: np.ndarray | None
    error: InferenceServerException | None
    sent: float
    done: float

    @property
    def batch_size(self) -> int:
        assert self.output is not None, self.error
        return int(self.output[0, 0])


def probe(url: str, model: str, tag: float = 0, spins: int = 0, **kwargs: Any) -> Outcome:
    """Send one row ``[spins, tag]`` to a BatchProbe model."""
    client = httpclient.InferenceServerClient(url)
    data = np.array([[spins, tag]], dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [1, 2], "FP32")
    tensor.set_data_from_numpy(data)
    sent = time.monotonic()
    try:
        result = client.infer(model, [tensor], **kwargs)
        return Outcome(tag, result.as_numpy("OUTPUT0"), None, sent, time.monotonic())
    except InferenceServerException as exc:
        return Outcome(tag, None, exc, sent, time.monotonic())
    finally:
        client.close()


class Background:
    """Calls running on their own threads; ``results()`` waits for them all."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._results: list[Any] = []
        self._lock = threading.Lock()

    def start(self, call: Callable[[], Any]) -> None:
        index = len(self._threads)
        with self._lock:
            self._results.append(None)

        def run() -> None:
            value = call()
            with self._lock:
                self._results[index] = value

        thread = threading.Thread(target=run, daemon=True)
        self._threads.append(thread)
        thread.start()

    def results(self, timeout: float = 60.0) -> list[Any]:
        for thread in self._threads:
            thread.join(timeout)
            assert not thread.is_alive(), "a request did not come back"
        return list(self._results)


def stats(url: str, model: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{url}/v2/models/{model}/stats", timeout=10) as reply:
        body: dict[str, Any] = json.loads(reply.read())
    [entry] = body["model_stats"]
    return entry


def batch_histogram(entry: dict[str, Any]) -> dict[int, int]:
    return {b["batch_size"]: b["compute_infer"]["count"] for b in entry["batch_stats"]}


def assert_stats_add_up(entry: dict[str, Any], fillers: bool = False) -> None:
    """inference_count = rows of all batches; execution_count = batches; one queue per success.
    With ``fillers`` (a sequence batcher's empty slots count in a batch's size, as in the
    reference, but are no inferences) inference_count may be smaller."""
    histogram = batch_histogram(entry)
    rows = sum(size * count for size, count in histogram.items())
    if fillers:
        assert entry["inference_count"] <= rows
    else:
        assert entry["inference_count"] == rows
    assert entry["execution_count"] == sum(histogram.values())
    inference = entry["inference_stats"]
    assert inference["queue"]["count"] == inference["success"]["count"]
    assert inference["compute_infer"]["count"] == inference["success"]["count"]
