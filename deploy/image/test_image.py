"""The CPU image, really run: `make test-image` (after `make image`).

Starts the container with podman, serves the example repository mounted at /models, and asks it
with tritonclient over HTTP and gRPC; then the same image as KServe starts it (the
ClusterServingRuntime's arguments, one model's files at /mnt/models). IMAGE names the image
(default localhost/ptserve:cpu).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml

from ptserve.examples import Scale, build_example_repository

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("IMAGE", "localhost/ptserve:cpu")
os.environ.setdefault("CONTAINERS_CONF", str(Path(__file__).with_name("containers.conf")))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    done = subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {done.returncode}\n{done.stderr}")
    return done.stdout


def readable(folder: Path) -> Path:
    """The container runs as uid 1000: let it read what the tests wrote."""
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


class Container:
    def __init__(self, mounts: dict[Path, str], args: list[str], ports: dict[int, int]) -> None:
        self.name = f"ptserve-test-{os.getpid()}-{free_port()}"
        self.ports = {inside: free_port() for inside in ports}
        command = ["run", "--detach", "--name", self.name]
        for inside, outside in self.ports.items():
            command += ["--publish", f"127.0.0.1:{outside}:{inside}"]
        for source, target in mounts.items():
            command += ["--volume", f"{source}:{target}:ro"]
        podman(*command, IMAGE, *args)

    def url(self, inside: int) -> str:
        return f"127.0.0.1:{self.ports[inside]}"

    def wait_ready(self, port: int, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.url(port)}/v2/health/ready") as reply:
                    if reply.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            state = podman("inspect", "--format", "{{.State.Status}}", self.name).strip()
            assert state == "running", f"the container is {state}:\n{self.logs()}"
            time.sleep(0.5)
        raise AssertionError(f"not ready after {timeout} s:\n{self.logs()}")

    def logs(self) -> str:
        done = subprocess.run(
            ["podman", "logs", self.name], capture_output=True, text=True, check=False
        )
        return done.stdout + done.stderr

    def remove(self) -> None:
        podman("rm", "--force", "--time", "5", self.name, check=False)


@pytest.fixture(scope="module", autouse=True)
def image() -> None:
    assert shutil.which("podman"), "podman is needed (make image installs it)"
    podman("image", "exists", IMAGE)  # fails with a message when `make image` has not run


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("examples")
    build_example_repository(repository)
    return readable(repository)


@pytest.fixture(scope="module")
def served(examples: Path) -> Iterator[Container]:
    container = Container({examples: "/models"}, [], {8000: 0, 8001: 0, 8002: 0})
    try:
        container.wait_ready(8000)
        yield container
    finally:
        container.remove()


def test_http_inference_with_tritonclient(served: Container) -> None:
    client = httpclient.InferenceServerClient(served.url(8000))
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones_like(a)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert set(client.get_server_metadata()["extensions"]) >= {"model_repository", "statistics"}


def test_grpc_inference_and_metrics(served: Container) -> None:
    client = grpcclient.InferenceServerClient(served.url(8001))
    x = np.random.rand(4, 64).astype(np.float32)
    inputs = [grpcclient.InferInput("INPUT__0", [4, 64], "FP32")]
    inputs[0].set_data_from_numpy(x)
    assert client.infer("mlp", inputs).as_numpy("OUTPUT__0").shape == (4, 10)
    with urllib.request.urlopen(f"http://{served.url(8002)}/metrics") as reply:
        assert 'nv_inference_count{model="mlp",version="1"} 4' in reply.read().decode()


def test_the_image_is_built_as_promised(served: Container) -> None:
    inspected = json.loads(podman("image", "inspect", IMAGE))[0]
    config = inspected["Config"]
    assert config["User"].split(":")[0] == "1000"
    assert config["Entrypoint"] == ["ptserve"]
    assert set(config["ExposedPorts"]) == {"8000/tcp", "8001/tcp", "8002/tcp"}
    healthcheck = config.get("Healthcheck") or inspected["Healthcheck"]  # podman: top level
    assert "/v2/health/ready" in " ".join(healthcheck["Test"])
    # The health check itself passes in the running container.
    podman("healthcheck", "run", served.name)
    assert podman("exec", served.name, "id", "-u").strip() == "1000"
    # No build tools: no compiler, no pip, in the final stage.
    found = podman(
        "exec", served.name, "sh", "-c", "command -v gcc cc g++ make pip pip3 || true"
    ).strip()
    assert found == ""
    assert "No module named pip" in podman(
        "exec", served.name, "sh", "-c", "python3 -m pip --version 2>&1 || true"
    )


def test_sigterm_drains_and_exits_cleanly(examples: Path) -> None:
    container = Container({examples: "/models"}, [], {8000: 0})
    try:
        container.wait_ready(8000)
        podman("stop", "--time", "40", container.name, timeout=60)
        code = podman("inspect", "--format", "{{.State.ExitCode}}", container.name).strip()
        assert code == "0", container.logs()
        assert "stopped" in container.logs()
    finally:
        container.remove()


def test_kserve_runtime_arguments_and_mnt_models(tmp_path: Path) -> None:
    """The image started as the ClusterServingRuntime starts it, with one model's files (no
    version folder) where KServe's storage initializer puts them."""
    models = tmp_path / "models"
    models.mkdir()
    (models / "config.pbtxt").write_text(
        'platform: "pytorch_libtorch"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    torch.jit.save(torch.jit.script(Scale(2.5)), str(models / "model.pt"))
    runtime = yaml.safe_load(
        (ROOT / "deploy" / "kserve" / "clusterservingruntime.yaml").read_text()
    )
    args = [a.replace("{{.Name}}", "my-isvc") for a in runtime["spec"]["containers"][0]["args"]]
    container = Container({readable(models): "/mnt/models"}, args, {8080: 0, 9000: 0})
    try:
        container.wait_ready(8080)
        client = httpclient.InferenceServerClient(container.url(8080))
        inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(np.ones((1, 4), np.float32))
        assert client.infer("my-isvc", inputs).as_numpy("OUTPUT0")[0, 0] == 2.5
        grpc = grpcclient.InferenceServerClient(container.url(9000))
        assert grpc.is_model_ready("my-isvc")
    finally:
        container.remove()
