"""The servers a benchmark compares: ptserve, and Triton with its LibTorch backend as a peer.

Both are started on the same model repository, pinned to the same cores (``taskset``), and asked
by the same load generator. Triton is started by the command in ``TRITON_START``: it takes the
repository folder and then tritonserver flags, reads its ports from ``HTTP_PORT``,
``GRPC_PORT`` and ``METRICS_PORT``, and must ``exec`` tritonserver (so that the process measured
for CPU time is the server). Configs shared by both must be ones Triton accepts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
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


# The phases of a request that both servers' statistics extensions count, in the order a request
# passes them. Their "success" duration is left out: each server starts that clock at another
# point of its request path, so it does not compare.
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")

Totals = dict[str, tuple[int, int]]  # phase -> (count, nanoseconds) so far


def phase_totals(http_url: str, model: str) -> Totals:
    """Each phase's count and nanoseconds so far, summed over the model's versions, from the
    server's statistics (``GET /v2/models/<model>/stats``, the same on both servers)."""
    url = f"http://{http_url}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as reply:
        entries = json.loads(reply.read())["model_stats"]
    totals: Totals = {}
    for phase in ("success", *PHASES):
        count = sum(int(e["inference_stats"][phase]["count"]) for e in entries)
        ns = sum(int(e["inference_stats"][phase]["ns"]) for e in entries)
        totals[phase] = (count, ns)
    return totals


def phase_means(before: Totals, after: Totals) -> dict[str, float]:
    """Microseconds per request of each phase between two snapshots, as ``<phase>_us``, and
    ``answered``: the requests that succeeded between them."""
    means = {"answered": float(after["success"][0] - before["success"][0])}
    for phase in PHASES:
        count = after[phase][0] - before[phase][0]
        means[f"{phase}_us"] = (after[phase][1] - before[phase][1]) / 1000 / max(count, 1)
    return means


def with_phases(
    http_url: str, model: str, measure: Callable[[], dict[str, float]]
) -> dict[str, float]:
    """``measure()``'s figures, plus the server's own time per request in each phase over the
    run (see ``phase_means``)."""
    before = phase_totals(http_url, model)
    figures = measure()
    figures.update(phase_means(before, phase_totals(http_url, model)))
    return figures


def phase_rows(
    rows: Mapping[tuple[str, ...], Sequence[Mapping[str, float]]], labels: Sequence[str]
) -> list[str]:
    """A markdown table of the phases per request, median over the repeats, one row per key
    of ``rows`` (its parts under ``labels``); the last column sums the three compute phases,
    the time a request holds the model instance."""
    header = [*labels, *(f"{p} µs" for p in PHASES), "compute µs"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, runs in rows.items():
        medians = {p: statistics.median(r[f"{p}_us"] for r in runs) for p in PHASES}
        compute = sum(medians[p] for p in PHASES[1:])
        cells = [*key, *(f"{medians[p]:.1f}" for p in PHASES), f"{compute:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def ratio_cells(ratios: Sequence[float]) -> list[str]:
    """Two table cells for ptserve / peer ratios measured repeat by repeat: each of them, and
    their median ("-" when there is none), the verdict that one lucky or unlucky repeat of either
    server cannot decide, unlike the best of each."""
    listed = " ".join(f"{r:.2f}" for r in ratios)
    return [listed, f"{statistics.median(ratios):.2f}" if ratios else "-"]
