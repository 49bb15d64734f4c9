"""Replicas behind a real HAProxy (deploy/local/cluster.py): a rolling restart under load
fails no request, and sequences stay on one replica by their correlation id."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from torch import nn

from ptserve.examples import write_model
from tests.core.slow import write_slow
from tests.deploy.helpers import wait_until
from tests.serverproc import free_port

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "deploy" / "local" / "cluster.py"
HEADER = "x-sequence-id"  # HTTP headers ignore case; gRPC metadata keys must be lowercase
# gRPC answers in trailers, after HTTP status 200, so HAProxy cannot retry a call a stopping
# replica refused (UNAVAILABLE, before any work): the gRPC client does, by the recipe's policy.
GRPC_RETRY = [
    ("grpc.enable_retries", 1),
    ("grpc.service_config", (ROOT / "deploy" / "local" / "grpc-retry.json").read_text()),
]


class RunningCluster:
    def __init__(self, tmp_path: Path, repository: Path, replicas: int) -> None:
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        assert Path(haproxy).exists(), "HAProxy is needed (make install-test installs it)"
        self.http_port, self.grpc_port = free_port(), free_port()
        self.state_file = tmp_path / "cluster.json"
        self.run_dir = tmp_path / "run"
        self.log = open(tmp_path / "cluster.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(CLUSTER),
                "--replicas",
                str(replicas),
                "--model-repository",
                str(repository),
                "--haproxy",
                haproxy,
                "--http-port",
                str(self.http_port),
                "--grpc-port",
                str(self.grpc_port),
                "--state",
                str(self.state_file),
                "--run-dir",
                str(self.run_dir),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, OMP_NUM_THREADS="1"),
        )
        self.replicas = replicas
        wait_until(self.state_file.exists, 30, "the cluster's state file")
        self.wait_all_up()

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def state(self) -> dict[str, Any]:
        return json.loads(self.state_file.read_text())  # type: ignore[no-any-return]

    def servers(self) -> dict[tuple[str, str], str]:
        """(backend, server) → HAProxy's status of it (UP, DOWN, ...), from its admin socket."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(self.state()["admin_socket"])
            sock.sendall(b"show stat\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        lines = data.decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        status = header.index("status")
        found = {}
        for line in lines[1:]:
            fields = line.split(",")
            if len(fields) > status and fields[1] not in ("FRONTEND", "BACKEND"):
                found[(fields[0], fields[1])] = fields[status]
        return found

    def wait_all_up(self, timeout: float = 180.0) -> None:
        def all_up() -> bool:
            assert self.process.poll() is None, self.logs()
            servers = self.servers() if Path(self.state()["admin_socket"]).exists() else {}
            return len(servers) == 4 * self.replicas and set(servers.values()) == {"UP"}

        wait_until(all_up, timeout, "every replica UP in HAProxy")

    def replica(self, name: str) -> dict[str, Any]:
        return next(r for r in self.state()["replicas"] if r["name"] == name)

    def logs(self) -> str:
        text = (self.state_file.parent / "cluster.log").read_text(errors="replace")
        for path in sorted(self.run_dir.glob("*.log")):
            text += f"\n--- {path.name}\n" + path.read_text(errors="replace")[-4000:]
        return text

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(90)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def replica_stats(port: int, model: str) -> int:
    """How many requests of ``model`` one replica answered (asked of it directly)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/stats") as reply:
        stats = json.loads(reply.read())["model_stats"]
    return sum(int(s["inference_stats"]["success"]["count"]) for s in stats)


# --- rolling restart -----------------------------------------------------------------------------


class Load:
    """Clients sending requests through the load balancer until stopped (bounded in time)."""

    def __init__(self, cluster: RunningCluster, http_clients: int, grpc_clients: int) -> None:
        self.cluster = cluster
        self.stop_event = threading.Event()
        self.successes = 0
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.http) for _ in range(http_clients)]
        self.threads += [threading.Thread(target=self.grpc) for _ in range(grpc_clients)]
        self.deadline = time.monotonic() + 240
        for thread in self.threads:
            thread.start()

    def running(self) -> bool:
        return not self.stop_event.is_set() and time.monotonic() < self.deadline

    def record(self, error: str | None) -> None:
        with self.lock:
            if error is None:
                self.successes += 1
            else:
                self.failures.append(error)

    def http(self) -> None:
        client = httpclient.InferenceServerClient(self.cluster.http_url, network_timeout=30)
        data = np.ones((1, 4), np.float32)
        while self.running():
            tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
            tensor.set_data_from_numpy(data)
            try:
                result = client.infer("slow", [tensor]).as_numpy("OUTPUT0")
                self.record(None if result[0, 0] == 2.0 else f"wrong result {result}")
            except Exception as exc:
                self.record(f"HTTP: {exc!r}")
        client.close()

    def grpc(self) -> None:
        client = grpcclient.InferenceServerClient(self.cluster.grpc_url, channel_args=GRPC_RETRY)
        data = np.ones((1, 4), np.float32)
        while self.running():
            tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
            tensor.set_data_from_numpy(data)
            try:
                result = client.infer("slow", [tensor], client_timeout=30).as_numpy("OUTPUT0")
                self.record(None if result[0, 0] == 2.0 else f"wrong result {result}")
            except Exception as exc:
                self.record(f"gRPC: {exc}")
        client.close()

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join()


@pytest.fixture
def slow_cluster(tmp_path: Path) -> Iterator[RunningCluster]:
    repository = tmp_path / "models"
    write_slow(repository, "slow", {1: 2.0}, iterations=15)  # a few ms per request
    cluster = RunningCluster(tmp_path, repository, replicas=2)
    yield cluster
    cluster.stop()


def test_a_rolling_restart_under_load_fails_no_request(slow_cluster: RunningCluster) -> None:
    cluster = slow_cluster
    load = Load(cluster, http_clients=3, grpc_clients=1)
    try:
        wait_until(lambda: load.successes > 30, 60, "load flowing")
        for name in ("r0", "r1"):  # one replica at a time, as a Deployment rolls
            before = cluster.replica(name)
            os.kill(before["pid"], signal.SIGTERM)
            wait_until(lambda n=name: cluster.replica(n)["starts"] == 2, 60, f"{name} restarted")
            cluster.wait_all_up()
            served = load.successes
            wait_until(lambda s=served: load.successes > s + 30, 60, "load after the restart")
    finally:
        load.stop()
    log = cluster.logs()
    assert load.failures == [], load.failures[:5]
    assert load.successes > 100
    # Each stopped replica drained: it refused new work and exited cleanly.
    assert "replica r0 exited with 0" in log and "replica r1 exited with 0" in log
    # The restarted replicas took traffic again.
    for name in ("r0", "r1"):
        assert replica_stats(cluster.replica(name)["http_port"], "slow") > 0


# --- sequences ------------------------------------------------------------------------------------


class Accumulate(nn.Module):
    """OUTPUT = the sum of a sequence's INPUTs so far (START resets the implicit state)."""

    def forward(
        self, INPUT: torch.Tensor, START: torch.Tensor, STATE_IN: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        state = STATE_IN * (1 - START.to(torch.float32)) + INPUT
        return state, state


ACCUMULATE_CONFIG = """
    name: "acc"
    platform: "pytorch_libtorch"
    max_batch_size: 8
    input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
    output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
    sequence_batching {
      max_sequence_idle_microseconds: 10000000
      control_input [
        { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
      ]
      state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32
                dims: [ 1 ] } ]
    }
"""
STEPS = 5


def run_sequence(cluster: RunningCluster, sequence_id: int, sticky: bool, grpc: bool) -> list[Any]:
    """One sequence of STEPS requests; returns the outputs, or the error that ended it."""
    headers = {HEADER: str(sequence_id)} if sticky else None
    module = grpcclient if grpc else httpclient
    client: Any = (
        grpcclient.InferenceServerClient(cluster.grpc_url)
        if grpc
        else httpclient.InferenceServerClient(cluster.http_url, network_timeout=30)
    )
    outputs: list[Any] = []
    try:
        for step in range(STEPS):
            tensor = module.InferInput("INPUT", [1, 1], "FP32")
            tensor.set_data_from_numpy(np.array([[step + 1]], np.float32))
            result = client.infer(
                "acc",
                [tensor],
                sequence_id=sequence_id,
                sequence_start=step == 0,
                sequence_end=step == STEPS - 1,
                headers=headers,
            )
            outputs.append(float(result.as_numpy("OUTPUT")[0, 0]))
    except Exception as exc:
        outputs.append(f"{type(exc).__name__}: {exc}")
    finally:
        client.close()
    return outputs


def run_sequences(cluster: RunningCluster, ids: range, sticky: bool) -> dict[int, list[Any]]:
    results: dict[int, list[Any]] = {}

    def run(sequence_id: int) -> None:
        results[sequence_id] = run_sequence(cluster, sequence_id, sticky, grpc=sequence_id % 4 == 0)

    threads = [threading.Thread(target=run, args=(i,)) for i in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_sequences_stay_on_one_replica_by_correlation_id(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    write_model(repository, "acc", ACCUMULATE_CONFIG, {1: torch.jit.script(Accumulate())})
    cluster = RunningCluster(tmp_path, repository, replicas=3)
    try:
        expected = [float(sum(range(1, n + 2))) for n in range(STEPS)]  # 1, 3, 6, 10, 15
        ids = range(1, 13)  # 3 of the 12 go over gRPC, with the id in the call's metadata
        results = run_sequences(cluster, ids, sticky=True)
        assert results == {i: expected for i in ids}
        counts = [replica_stats(r["http_port"], "acc") for r in cluster.state()["replicas"]]
        assert sum(counts) == len(ids) * STEPS
        assert all(c % STEPS == 0 for c in counts), counts  # whole sequences per replica
        assert sum(1 for c in counts if c) >= 2, counts  # and spread over the replicas

        # Without the header the requests are balanced one by one: sequences break.
        unsticky = run_sequences(cluster, range(101, 107), sticky=False)
        broken = [r for r in unsticky.values() if r != expected]
        assert broken, unsticky
        assert any("START" in str(r[-1]) or "sequence" in str(r[-1]) for r in broken), broken
    finally:
        cluster.stop()
