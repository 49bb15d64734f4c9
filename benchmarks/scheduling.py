"""Dynamic batching under load: the example CNN and MLP served with and without batching.

    python -m benchmarks.scheduling [--seconds 5] [--repeats 2] [--concurrency 32]
                                    [--protocol http|grpc]

The server runs on core 0 (``taskset``), perf_analyzer (binary tensors) on core 1, torch at one
thread. The in-process baseline calls the same TorchScript file at batch 32 on core 0, once as a
plain process and once with the server's host memory setting (``--retain-host-memory``, on by
default), which speeds the model itself up: the second ratio is the serving overhead alone. Both
sides compute on the same kind of values: 64 seeded normal samples, which perf_analyzer sends in
turn (``--input-data``) and of which the baseline's batch holds 32. A CNN's speed depends on its
input: perf_analyzer's default sends one sample of random bytes with every request, and a batch
of 32 copies of one sample runs about a fifth faster than a batch of 32 different ones.

Each served line gives the server process's CPU time per request. For the CNN, what it spends
beyond the in-process time per sample is set against the budget that the CNN target leaves,
``(1 / 0.85 - 1)`` times that time, and against the floor: what no server on this core can
avoid, measured on a few lines of uvloop and httptools that answer every infer request with a
canned response (``benchmarks.floor_server``; its CPU time per request is the kernel's socket
work and one pass of the event loop and parser).

Every figure is printed beside the one it is compared with, from the same run, because absolute
numbers on a shared two-core machine drift; ``--repeats`` shows how much. The batch-size
histograms come from the server's statistics endpoint.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tests.serverproc import ServerProcess, free_port

from benchmarks.serving import perf_analyzer_path
from ptserve.common.host_memory import retain_freed_memory
from ptserve.examples import CNN_CONFIG, MLP_CONFIG, build_example_repository

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


SAMPLES = 64


def samples(model: str) -> np.ndarray:
    """The requests' inputs that both sides compute on: ``SAMPLES`` different ones."""
    shape = (SAMPLES, *SHAPES[model])
    return np.random.default_rng(0).standard_normal(shape, dtype=np.float32)


def write_input_data(folder: Path) -> dict[str, Path]:
    """perf_analyzer ``--input-data`` files holding ``samples(model)`` (it sends them in turn),
    per example model."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for model in SHAPES:
        path = folder / f"{model}-input.json"
        steps = [{"INPUT__0": one.ravel().tolist()} for one in samples(model)]
        path.write_text(json.dumps({"data": steps}))
        files[model] = path
    return files


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


def in_process(model_file: Path, model: str, seconds: float, retain: bool) -> float:
    """Samples/s of the TorchScript file called directly on the first core, in a fresh
    interpreter: the host memory setting (``--retain-host-memory``) is per process."""
    command = [
        "taskset", "-c", "0", sys.executable, "-m", "benchmarks.scheduling",
        "--baseline", str(model_file), "--model", model,
        "--seconds", str(seconds),
    ]  # fmt: skip
    if retain:
        command.append("--retain-host-memory")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(
        command, check=True, capture_output=True, text=True, env=env, timeout=seconds * 10 + 120
    )
    return float(result.stdout.split()[-1])


def baseline(model_file: Path, model: str, seconds: float, retain: bool) -> float:
    """The in-process measurement itself (run by ``in_process`` in its own interpreter): a
    batch of 32 of the samples perf_analyzer sends."""
    if retain:
        retain_freed_memory()
    torch.set_num_threads(1)
    module = torch.jit.load(str(model_file))
    module.eval()
    data = torch.from_numpy(samples(model)[:32].copy())
    with torch.inference_mode():
        for _ in range(20):
            module(data)
        calls = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            module(data)
            calls += 1
        return calls * data.shape[0] / (time.perf_counter() - started)


def perf_analyzer(
    binary: str,
    url: str,
    model: str,
    concurrency: int,
    seconds: float,
    core: int,
    input_data: Path,
    protocol: str = "http",
    timeout: float | None = None,
) -> dict[str, float]:
    with tempfile.NamedTemporaryFile(suffix=".csv") as report:
        command = [
            "taskset", "-c", str(core), binary,
            "-m", model, "-u", url, "-i", protocol, "-b", "1",
            "--concurrency-range", str(concurrency),
            "--measurement-interval", str(int(seconds * 1000)),
            "--stability-percentage", "50",
            "--input-data", str(input_data),
            "-f", report.name,
        ]  # fmt: skip
        limit = timeout if timeout is not None else seconds * 20 + 120
        subprocess.run(command, check=True, capture_output=True, timeout=limit)
        row = list(csv.DictReader(io.StringIO(Path(report.name).read_text())))[-1]
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50_us": float(row["p50 latency"]),
        "p99_us": float(row["p99 latency"]),
    }


def get_json(url: str, path: str) -> Any:
    with urllib.request.urlopen(f"http://{url}{path}", timeout=10) as reply:
        return json.loads(reply.read())


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def model_requests(url: str, model: str) -> int:
    entry = get_json(url, f"/v2/models/{model}/stats")["model_stats"][0]
    return int(entry["inference_stats"]["success"]["count"])


def with_server_cpu(
    server: ServerProcess, model: str, measure: Callable[[], dict[str, float]]
) -> dict[str, float]:
    """``measure()``'s figures, plus the server process's CPU microseconds per request answered
    over the whole perf_analyzer run (``cpu_us``)."""
    assert server.process is not None
    cpu, requests = process_cpu_s(server.process.pid), model_requests(server.http_url, model)
    figures = measure()
    cpu_after = process_cpu_s(server.process.pid)
    requests_after = model_requests(server.http_url, model)
    figures["cpu_us"] = (cpu_after - cpu) * 1e6 / max(requests_after - requests, 1)
    return figures


FLOOR_CONCURRENCY = 4
FLOOR_WINDOW_S = 1.0
FLOOR_TRIES = 3


def floor(binary: str, server_url: str, model: str, input_data: Path) -> dict[str, float] | None:
    """The canned-answer server (``benchmarks.floor_server``) on core 0 under perf_analyzer:
    its throughput and CPU microseconds per request. perf_analyzer (2.60) stops making progress
    against a server this fast at 32 concurrent requests, and now and then at 8, so the floor is
    measured at 4 with 1 s windows, tried up to three times; None if no try finishes."""
    config = get_json(server_url, f"/v2/models/{model}/config")
    output = config["output"][0]
    dims = [1, *(int(d) for d in output["dims"])]
    answers = {
        "model": model,
        "/v2": get_json(server_url, "/v2"),
        f"/v2/models/{model}": get_json(server_url, f"/v2/models/{model}"),
        f"/v2/models/{model}/config": config,
        # perf_analyzer reads the statistics around each window; the floor server moves their
        # counts with the requests it answers
        f"/v2/models/{model}/stats": get_json(server_url, f"/v2/models/{model}/stats"),
        "infer": {  # (the example CNN's output is FP32)
            "name": output["name"],
            "datatype": "FP32",
            "shape": dims,
            "byte_size": 4 * int(np.prod(dims)),
        },
    }
    with tempfile.TemporaryDirectory() as folder:
        answers_file = Path(folder) / "answers.json"
        answers_file.write_text(json.dumps(answers))
        port = free_port()
        url = f"127.0.0.1:{port}"
        command = [
            "taskset", "-c", "0", sys.executable, "-m", "benchmarks.floor_server",
            "--port", str(port), "--answers", str(answers_file),
        ]  # fmt: skip
        with subprocess.Popen(command) as process:
            try:
                deadline = time.monotonic() + 30
                while True:  # until it listens
                    try:
                        get_json(url, "/floor")
                        break
                    except OSError:
                        if time.monotonic() > deadline or process.poll() is not None:
                            raise
                        time.sleep(0.1)
                for _ in range(FLOOR_TRIES):
                    before = get_json(url, "/floor")
                    try:
                        figures = perf_analyzer(
                            binary, url, model, FLOOR_CONCURRENCY, FLOOR_WINDOW_S, 1,
                            input_data, timeout=60,
                        )  # fmt: skip
                        break
                    except subprocess.SubprocessError:
                        continue
                else:
                    return None
                after = get_json(url, "/floor")
            finally:
                process.terminate()
    requests = max(after["requests"] - before["requests"], 1)
    figures["cpu_us"] = (after["cpu_s"] - before["cpu_s"]) * 1e6 / requests
    return figures


def histogram(url: str, model: str) -> dict[int, int]:
    entry: dict[str, Any] = get_json(url, f"/v2/models/{model}/stats")["model_stats"][0]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in entry["batch_stats"]}


TARGET = 0.85  # of the in-process batch-32 throughput


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--protocol", choices=["http", "grpc"], default="http")
    parser.add_argument("--baseline", type=Path, help=argparse.SUPPRESS)  # see in_process()
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--retain-host-memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline:
        print(baseline(args.baseline, args.model, args.seconds, args.retain_host_memory))
        return
    binary = perf_analyzer_path()
    if binary is None:
        sys.exit("perf_analyzer is not installed: set PERF_ANALYZER to its path")
    repository = Path(tempfile.mkdtemp(prefix="ptserve-sched-bench-"))
    write_variants(repository)
    data = write_input_data(repository.parent / f"{repository.name}-data")
    runs: list[dict[str, Any]] = []
    with PinnedServer([repository], core=0) as server:
        url = server.http_url
        load_url = server.grpc_url if args.protocol == "grpc" else url
        for repeat in range(args.repeats):
            row: dict[str, Any] = {"repeat": repeat}
            cnn_file = repository / "cnn_plain" / "1" / "model.pt"
            row["cnn_inproc_b32"] = in_process(cnn_file, "cnn", args.seconds, retain=False)
            row["cnn_inproc_b32_retained"] = in_process(cnn_file, "cnn", args.seconds, retain=True)
            for model in ("cnn_batched", "mlp_batched", "mlp_plain"):
                kind = model.split("_")[0]

                def measure(model: str = model, kind: str = kind) -> dict[str, float]:
                    return perf_analyzer(
                        binary, load_url, model, args.concurrency, args.seconds, 1,
                        data[kind], args.protocol,
                    )  # fmt: skip

                row[model] = with_server_cpu(server, model, measure)
            row["floor"] = floor(binary, url, "cnn_batched", data["cnn"])
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
                    f"p99/p50 {served['p99_us'] / served['p50_us']:.2f}; server core "
                    f"{served['cpu_us']:.1f} us per request",
                    flush=True,
                )
            budget = (1 / TARGET - 1) * 1e6 / retained
            base = row["floor"]
            spent = (
                "did not finish"
                if base is None
                else (
                    f"{base['throughput']:.0f} req/s at concurrency {FLOOR_CONCURRENCY}, "
                    f"{base['cpu_us']:.1f} us per request"
                )
            )
            beyond = cnn["cpu_us"] - 1e6 / retained
            print(
                f"    cnn_batched spends {beyond:.1f} us per request beyond the in-process "
                f"batch-32 time per sample; the cnn target ({TARGET:.0%}) leaves {budget:.1f} us; "
                f"floor (canned answers): {spent}",
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
