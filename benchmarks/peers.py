"""The servers a benchmark compares: ptserve, and Triton with its LibTorch backend as a peer.

Both are started on the same model repository, pinned to the same cores (``taskset``), and asked
by the same load generator. Triton is started by the command in ``TRITON_START``: it takes the
repository folder and then tritonserver flags, reads its ports from ``HTTP_PORT``,
``GRPC_PORT`` and ``METRICS_PORT``, and must ``exec`` tritonserver (so that the process measured
for CPU time is the server). Configs shared by both must be ones Triton accepts.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.serverproc import ServerProcess, free_port

PEERS = ("triton",)
THREADS = {"OMP_NUM_THREADS": "1"}  # one intra-op thread on both sides


class Pinned(ServerProcess):
    """ptserve on the given cores."""

    name = "ptserve"

    def __init__(self, repositories: Sequence[Path], cores: str, args: Sequence[str] = ()) -> None:
        super().__init__(repositories, ["--log-info=false", *args], env=THREADS)
        self.cores = cores

    def command(self) -> list[str]:
        return ["taskset", "-c", self.cores, *super().command()]

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


class Triton:
    """Triton started by ``TRITON_START`` on the given cores, with ServerProcess's URLs."""

    name = "triton"

    def __init__(self, repository: Path, cores: str, args: Sequence[str] = ()) -> None:
        command = os.environ.get("TRITON_START")
        if not command:
            raise SystemExit(
                "--peer triton needs TRITON_START: a command that starts tritonserver (with its "
                "PyTorch backend) on a repository folder given first, ports from HTTP_PORT, "
                "GRPC_PORT and METRICS_PORT"
            )
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.command = [
            "taskset", "-c", cores, *shlex.split(command), str(repository),
            "--log-info=false", *args,
        ]  # fmt: skip
        self.env = dict(
            os.environ,
            HTTP_PORT=str(self.http_port),
            GRPC_PORT=str(self.grpc_port),
            METRICS_PORT=str(self.metrics_port),
            **THREADS,
        )
        self.log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the process
            prefix="triton-", suffix=".log", delete=False
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log(self) -> str:
        self.log_file.flush()
        return Path(self.log_file.name).read_text(errors="replace")

    def __enter__(self) -> Triton:
        self.process = subprocess.Popen(
            self.command, stdout=self.log_file, stderr=subprocess.STDOUT, env=self.env
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited:\n{self.log()[-4000:]}")
            with contextlib.suppress(OSError, urllib.error.URLError):
                url = f"http://{self.http_url}/v2/health/ready"
                with urllib.request.urlopen(url, timeout=2) as reply:
                    if reply.status == 200:
                        return self
            time.sleep(0.2)
        self.__exit__()
        raise TimeoutError(f"tritonserver was not ready:\n{self.log()[-4000:]}")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


Server = Pinned | Triton


@contextlib.contextmanager
def servers(
    repository: Path,
    cores: str,
    peers: Sequence[str],
    args: Sequence[str] = (),
    peer_args: Sequence[str] = (),
) -> Iterator[list[Server]]:
    """ptserve and each named peer, started one after the other on ``cores``; all running
    together (they are measured in turn, so only one is under load at a time)."""
    with contextlib.ExitStack() as stack:
        started: list[Server] = [stack.enter_context(Pinned([repository], cores, args))]
        for peer in peers:
            if peer != "triton":
                raise SystemExit(f"unknown peer '{peer}': known peers are {', '.join(PEERS)}")
            started.append(stack.enter_context(Triton(repository, cores, peer_args)))
        yield started


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ratio_cells(ratios: Sequence[float]) -> list[str]:
    """Two table cells for ptserve / peer ratios measured repeat by repeat: each of them, and
    their median ("-" when there is none), the verdict that one lucky or unlucky repeat of either
    server cannot decide, unlike the best of each."""
    listed = " ".join(f"{r:.2f}" for r in ratios)
    return [listed, f"{statistics.median(ratios):.2f}" if ratios else "-"]
