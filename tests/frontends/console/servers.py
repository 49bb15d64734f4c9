"""What the console's tests serve: the example models plus a model that fails on negative input
(`fails`) and one whose file is not a model (`broken`), in explicit mode."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import torch

from ptserve.examples import write_model
from tests.frontends.http.rawhttp import request
from tests.models import Fails, identity_config
from tests.serverproc import ServerProcess

HEADER, SECRET = "x-console-key", "let-me-in"
# Every API group restricted: each route answers 403 without the header.
ALL_GROUPS = (
    "health,metadata,inference,shared-memory,model-config,model-repository,statistics,trace,logging"
)
BROKEN_CONFIG = """
    name: "broken"
    platform: "pytorch_libtorch"
    max_batch_size: 4
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
LOADED = ["simple", "mlp", "versioned", "fails"]
METRICS = [
    "--metrics-config",
    "summary_latencies=true",
    "--metrics-config",
    "histogram_latencies=true",
]


def wait_live(server: ServerProcess, headers: dict[str, str], timeout: float = 120.0) -> None:
    """Wait for liveness asked with ``headers`` (ServerProcess asks without any)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.process is not None
        if server.process.poll() is not None:
            raise RuntimeError(f"ptserve exited early:\n{server.log()}")
        try:
            if request(server.http_url, "GET", "/v2/health/live", headers=headers)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"ptserve was not live after {timeout} s:\n{server.log()}")


def explicit(models: list[str]) -> list[str]:
    args = ["--model-control-mode", "explicit", "--exit-on-error", "false"]
    for name in models:
        args += ["--load-model", name]
    return args


def build_repository(example_repository: Path, repository: Path) -> Path:
    for child in example_repository.iterdir():
        shutil.copytree(child, repository / child.name)
    write_model(
        repository,
        "fails",
        identity_config("fails", "TYPE_FP32", 8, "4"),
        {1: torch.jit.script(Fails())},
    )
    broken = repository / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text(BROKEN_CONFIG)
    (broken / "1" / "model.pt").write_bytes(b"this is not a TorchScript archive")
    return repository


def start_restricted(repository: Path, extra: list[str] | None = None) -> ServerProcess:
    """Every API group restricted to requests with HEADER: SECRET; `broken` loaded (and failed),
    so the server is live but not ready."""
    args = [
        *explicit([*LOADED, "broken"]),
        "--http-restricted-api",
        f"{ALL_GROUPS}:{HEADER}={SECRET}",
        *(extra or []),
    ]
    server = ServerProcess([repository], args).start(wait=None)
    try:
        wait_live(server, {HEADER: SECRET})
    except BaseException:
        server.stop()
        raise
    return server
