"""Dynamic batching under load: the example CNN and MLP served with and without batching.

    python -m benchmarks.scheduling [--seconds 5] [--repeats 2] [--concurrency 32]
                                    [--protocol http|grpc]

The server runs on core 0 (``taskset``), perf_analyzer (binary tensors) on core 1, torch at one
thread. The in-process baseline calls the same TorchScript file at batch 32 on core 0, once as a
plain process and once with the server's host memory setting (``--retain-host-memory``, on by
default), which speeds the model itself up: the second ratio is the serving overhead alone. Every
figure is printed beside the one it is compared with, from the same run, because absolute numbers
on a shared two-core machine drift; ``--repeats`` shows how much. The batch-size histograms come
from the server's statistics endpoint.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tests.serverproc import ServerProcess

from benchmarks.serving import perf_analyzer_path
from ptserve.examples import CNN_CONFIG, MLP_CONFIG, build_example_repository
from ptserve.host_memory import retain_freed_memory

SHAPES = {"mlp": (64,), "cnn": (3, 32, 32)}
BATCHED = "dynamic_batching { max_queue_delay_microseconds: 1000 }"
ONE_INSTANCE = "instance_group [ { count: 1 kind: KIND_CPU } ]"


class PinnedServer(ServerProcess):
    """The server process on one core."""

    def __init__(self, repositories: list[Path], core: int) -> None:
        super().__init__(repositories, ["--log-info=false"], env={"OMP_NUM_THREADS": "1"})
        self.core = core

    def command(self) -> list[str]:
        return ["taskset", "-c", str(self.core), *super().command()]


def write_variants(repository: Path) -> None:
    """``<model>_batched`` (max batch 32, 1 ms delay) and ``<model>_plain`` (no batching)."""
    examples = repository.parent / f"{repository.name}-examples"
    build_example_repository(examples)
    for model, config in (("mlp", MLP_CONFIG), ("cnn", CNN_CONFIG)):
        for variant, extra in (("batched", BATCHED), ("plain", "")):
            name = f"{model}_{variant}"
            folder = repository / name / "1"
            folder.mkdir(parents=True)
            (folder / "model.pt").write_bytes((examples / model / "1" / "model.pt").read_bytes())
            text = config.replace(f'name: "{model}"', f'name: "{name}"')
            (repository / name / "config.pbtxt").write_text(f"{text}\n{ONE_INSTANCE}\n{extra}\n")


def in_process(model_file: Path, shape: tuple[int, ...], seconds: float, retain: bool) -> float:
    """Samples/s of the TorchScript file called directly on the first core, in a fresh
    interpreter: the host memory setting (``--retain-host-memory``) is per process."""
    command = [
        "taskset", "-c", "0", sys.executable, "-m", "benchmarks.scheduling",
        "--baseline", str(model_file), "--shape", ",".join(map(str, shape)),
        "--seconds", str(seconds),
    ]  # fmt: skip
    if retain:
        command.append("--retain-host-memory")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(
        command, check=True, capture_output=True, text=True, env=env, timeout=seconds * 10 + 120
    )
    return float(result.stdout.split()[-1])


def baseline(model_file: Path, shape: tuple[int, ...], seconds: float, retain: bool) -> float:
    """The in-process measurement itself (run by ``in_process`` in its own interpreter)."""
    if retain:
        retain_freed_memory()
    torch.set_num_threads(1)
    module = torch.jit.load(str(model_file))
    module.eval()
    data = torch.from_numpy(np.random.default_rng(0).standard_normal(shape, dtype=np.float32))
    with torch.inference_mode():
        for _ in range(20):
            module(data)
        calls = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            module(data)
            calls += 1
        return calls * shape[0] / (time.perf_counter() - started)


def perf_analyzer(
    binary: str,
    url: str,
    model: str,
    concurrency: int,
    seconds: float,
    core: int,
    protocol: str = "http",
) -> dict[str, float]:
    with tempfile.NamedTemporaryFile(suffix=".csv") as report:
        command = [
            "taskset", "-c", str(core), binary,
            "-m", model, "-u", url, "-i", protocol, "-b", "1",
            "--concurrency-range", str(concurrency),
            "--measurement-interval", str(int(seconds * 1000)),
            "--stability-percentage", "50",
            "-f", report.name,
        ]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, timeout=seconds * 20 + 120)
        row = list(csv.DictReader(io.StringIO(Path(report.name).read_text())))[-1]
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50_us": float(row["p50 latency"]),
        "p99_us": float(row["p99 latency"]),
    }


def histogram(url: str, model: str) -> dict[int, int]:
    with urllib.request.urlopen(f"http://{url}/v2/models/{model}/stats", timeout=10) as reply:
        entry: dict[str, Any] = json.loads(reply.read())["model_stats"][0]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in entry["batch_stats"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--protocol", choices=["http", "grpc"], default="http")
    parser.add_argument("--baseline", type=Path, help=argparse.SUPPRESS)  # see in_process()
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    parser.add_argument("--retain-host-memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline:
        shape = tuple(int(d) for d in args.shape.split(","))
        print(baseline(args.baseline, shape, args.seconds, args.retain_host_memory))
        return
    binary = perf_analyzer_path()
    if binary is None:
        sys.exit("perf_analyzer is not installed: set PERF_ANALYZER to its path")
    repository = Path(tempfile.mkdtemp(prefix="ptserve-sched-bench-"))
    write_variants(repository)
    runs: list[dict[str, Any]] = []
    with PinnedServer([repository], core=0) as server:
        url = server.http_url
        load_url = server.grpc_url if args.protocol == "grpc" else url
        for repeat in range(args.repeats):
            row: dict[str, Any] = {"repeat": repeat}
            cnn_file = repository / "cnn_plain" / "1" / "model.pt"
            shape = (32, *SHAPES["cnn"])
            row["cnn_inproc_b32"] = in_process(cnn_file, shape, args.seconds, retain=False)
            row["cnn_inproc_b32_retained"] = in_process(cnn_file, shape, args.seconds, retain=True)
            for model in ("cnn_batched", "mlp_batched", "mlp_plain"):
                row[model] = perf_analyzer(
                    binary, load_url, model, args.concurrency, args.seconds, 1, args.protocol
                )
            runs.append(row)
            cnn, mlp, plain = row["cnn_batched"], row["mlp_batched"], row["mlp_plain"]
            retained = row["cnn_inproc_b32_retained"]
            print(
                f"repeat {repeat}: cnn batched {cnn['throughput']:.0f} inf/s vs in-process "
                f"batch-32 {row['cnn_inproc_b32']:.0f} inf/s = "
                f"{cnn['throughput'] / row['cnn_inproc_b32']:.1%} (in-process with the "
                f"server's host memory setting: {retained:.0f} inf/s = "
                f"{cnn['throughput'] / retained:.1%}); mlp batched "
                f"{mlp['throughput']:.0f} vs plain {plain['throughput']:.0f} inf/s = "
                f"{mlp['throughput'] / plain['throughput']:.2f}x",
                flush=True,
            )
            for name in ("cnn_batched", "mlp_batched", "mlp_plain"):
                served = row[name]
                print(
                    f"    {name}: p50 {served['p50_us']:.0f} us, p99 {served['p99_us']:.0f} us, "
                    f"p99/p50 {served['p99_us'] / served['p50_us']:.2f}",
                    flush=True,
                )
        for model in ("cnn_batched", "mlp_batched", "mlp_plain"):
            counts = histogram(url, model)
            total = sum(counts.values())
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:6]
            shown = ", ".join(f"{size}: {count / total:.1%}" for size, count in top)
            print(f"batch sizes of {model} (share of {total} executions): {shown}")
    print(json.dumps(runs, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
