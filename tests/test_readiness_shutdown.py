"""Warm-up gating readiness, and a graceful SIGTERM, through the real server."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from ptserve.examples import write_model
from tests.core.slow import write_slow
from tests.models import Fails, identity_config
from tests.serverproc import ServerProcess
from tests.test_model_control import infer_scaled, wait_until

ZERO_WARMUP = """
    model_warmup [ {
      name: "zeros" batch_size: 2 count: 40
      inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
    } ]
"""


def test_warmup_runs_before_the_model_is_ready(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    write_slow(repository, "warm", {1: 1.0}, iterations=40, extra=ZERO_WARMUP)
    random_warmup = """
        model_warmup [ { name: "random" batch_size: 1
          inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } }
        } ]
    """
    file_warmup = """
        model_warmup [ { name: "negative" batch_size: 1
          inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "neg" } }
        } ]
    """
    config = identity_config("random_ok", "TYPE_FP32", 8, "4")
    write_model(repository, "random_ok", config + random_warmup, {1: torch.jit.script(Fails())})
    config = identity_config("file_fails", "TYPE_FP32", 8, "4")
    model_dir = write_model(
        repository, "file_fails", config + file_warmup, {1: torch.jit.script(Fails())}
    )
    (model_dir / "warmup").mkdir()
    (model_dir / "warmup" / "neg").write_bytes(np.full(4, -1.0, np.float32).tobytes())

    with ServerProcess([repository], ["--model-control-mode", "explicit"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        outcome: list[BaseException | None] = []

        def load() -> None:
            try:
                httpclient.InferenceServerClient(server.http_url, network_timeout=120).load_model(
                    "warm"
                )
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        loader = threading.Thread(target=load)
        loader.start()
        states: set[str] = set()
        checked = 0
        while loader.is_alive():
            entry = {e["name"]: e for e in client.get_model_repository_index()}["warm"]
            states.add(entry.get("state", ""))
            if entry.get("state") == "LOADING":
                # The load may finish between two calls: only a model still loading afterwards
                # proves anything, and then it must have been neither ready nor serving.
                ready = client.is_model_ready("warm")
                try:
                    infer_scaled(client, "warm")
                    served = True
                except InferenceServerException:
                    served = False
                after = {e["name"]: e for e in client.get_model_repository_index()}["warm"]
                if after.get("state") == "LOADING":
                    assert not ready and not served
                    checked += 1
            time.sleep(0.05)
        loader.join()
        assert outcome == [None]
        assert "LOADING" in states and checked > 0
        assert client.is_model_ready("warm") and infer_scaled(client, "warm") == 1.0
        log = server.log()
        assert "instance 'warm_0': warm-up 'zeros' ran 40 time(s)" in log
        assert "successfully loaded 'warm' version 1 in" in log

        client.load_model("random_ok")
        assert client.is_model_ready("random_ok")
        with pytest.raises(InferenceServerException) as failed:
            client.load_model("file_fails")
        assert "warm-up 'negative' failed" in str(failed.value)
        assert "negative input is not allowed" in str(failed.value)
        assert not client.is_model_ready("file_fails")


def test_sigterm_answers_requests_in_flight_then_exits_zero(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    write_slow(repository, "slow", {1: 1.0}, iterations=1500)
    server = ServerProcess([repository], ["--exit-timeout-secs", "60"]).start()
    results: list[float | str] = []

    def call() -> None:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
        try:
            results.append(infer_scaled(client, "slow"))
        except InferenceServerException as exc:
            results.append(str(exc))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # all four are queued or running
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    wait_until(lambda: server.status("/v2/health/ready") == 400, timeout=5)
    late = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as refused:
        infer_scaled(late, "slow")
    assert refused.value.status() == "503"
    for thread in threads:
        thread.join()
    assert results == [1.0] * 4
    assert server.wait_exit(60) == 0
    log = server.log()
    assert "waiting for" in log and "request(s) in flight" in log
    assert "stopped" in log
