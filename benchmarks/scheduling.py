"""Dynamic batching under load, side by side with a peer: the example CNN and MLP at batch 32.

    python -m benchmarks.scheduling [--seconds 5] [--repeats 2] [--concurrency 32]
                                    [--peer triton] [--scenarios NAME ...] [--floor]

Every server runs on core 0 (``taskset``), the load generator on core 1, torch at one intra-op
and one inter-op thread (config parameters both servers read). Models: ``<model>_batched`` (max
batch 32, 1 ms delay, one CPU instance) and ``mlp_plain`` (no batching). Each scenario is one
model asked one way at ``--concurrency``: perf_analyzer with binary tensors, with JSON tensors
(``--input-tensor-format json``), over gRPC, wrk posting v2 JSON or binary-tensor bodies, or
h2load sending gRPC ModelInfer messages (wrk and h2load cost their core a fraction of what
perf_analyzer does, so their rows are the ones where the server's core runs out first).
``--peer triton`` starts Triton with its LibTorch backend on the same repository (see
``benchmarks.peers``); the servers are measured in turn within each repeat, the best of
``--repeats`` is compared, and a second table gives ptserve / peer repeat by repeat with the
median of those ratios (throughput, server CPU per request, p99/p50), the verdict to quote.

Both sides compute on the same values: 64 seeded normal samples, sent in turn by perf_analyzer
(``--input-data``) and wrk (h2load sends the first), of which the in-process baseline's batch
holds 32. The baseline calls the same TorchScript file at batch 32 on core 0, as a plain
process, with ptserve's host memory setting (``--retain-host-memory``, on by default), and with
that and the batch in channels-last memory format (which ptserve's load-time probe chooses for
this CNN, ``INPUT_MEMORY_FORMAT``): both speed the model itself up, so served / that last one is
ptserve's serving overhead alone. Each row gives the
server's CPU time per request, how busy each core was, and which side held the throughput down:
a row "bound by" the client had a load generator using its whole core while the server had time
to spare, so its ratio says how much work each server makes for that client, not what the
server can do. "client ceiling" is what the load generator could drive with its whole core at
the CPU it spent per request in that row; with a peer, each row also says how much of that
ceiling the throughput target (1.2 x the peer) would take.
``--floor`` adds the canned-answer server (``benchmarks.floor_server``: a few lines of uvloop and
httptools that answer every infer request from memory): what any Python server on this core
spends per request before it does anything.

Figures from a shared two-core machine drift between runs: compare within one run only.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tests.serverproc import free_port

from benchmarks.peers import (
    PEERS,
    Server,
    phase_means,
    phase_rows,
    phase_totals,
    process_cpu_s,
    ratio_cells,
    servers,
)
from benchmarks.serving import perf_analyzer_path
from ptserve.common.host_memory import retain_freed_memory
from ptserve.examples import CNN_CONFIG, MLP_CONFIG, build_example_repository

SHAPES = {"mlp": (64,), "cnn": (3, 32, 32)}
BATCHED = "dynamic_batching { max_queue_delay_microseconds: 1000 }"
ONE_INSTANCE = "instance_group [ { count: 1 kind: KIND_CPU } ]"
ONE_THREAD = (
    'parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }\n'
    'parameters { key: "INTER_OP_THREAD_COUNT" value: { string_value: "1" } }'
)


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
            (repository / name / "config.pbtxt").write_text(
                f"{text}\n{ONE_INSTANCE}\n{ONE_THREAD}\n{extra}\n"
            )


def in_process(
    model_file: Path, model: str, seconds: float, retain: bool, channels_last: bool = False
) -> float:
    """Samples/s of the TorchScript file called directly on the first core, in a fresh
    interpreter: the host memory setting (``--retain-host-memory``) is per process;
    ``channels_last`` gives the batch in that memory format, as ptserve does for this CNN."""
    command = [
        "taskset", "-c", "0", sys.executable, "-m", "benchmarks.scheduling",
        "--baseline", str(model_file), "--model", model,
        "--seconds", str(seconds),
    ]  # fmt: skip
    if retain:
        command.append("--retain-host-memory")
    if channels_last:
        command.append("--channels-last")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(
        command, check=True, capture_output=True, text=True, env=env, timeout=seconds * 10 + 120
    )
    return float(result.stdout.split()[-1])


def baseline(
    model_file: Path, model: str, seconds: float, retain: bool, channels_last: bool = False
) -> float:
    """The in-process measurement itself (run by ``in_process`` in its own interpreter): a
    batch of 32 of the samples perf_analyzer sends."""
    if retain:
        retain_freed_memory()
    torch.set_num_threads(1)
    module = torch.jit.load(str(model_file))
    module.eval()
    data = torch.from_numpy(samples(model)[:32].copy())
    if channels_last:
        data = data.contiguous(memory_format=torch.channels_last)
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
    core: int | str,
    input_data: Path,
    protocol: str = "http",
    timeout: float | None = None,
    tensor_format: str = "binary",
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
        if protocol == "http":
            command += ["--input-tensor-format", tensor_format]
            command += ["--output-tensor-format", tensor_format]
        limit = timeout if timeout is not None else seconds * 20 + 120
        subprocess.run(command, check=True, capture_output=True, timeout=limit)
        row = list(csv.DictReader(io.StringIO(Path(report.name).read_text())))[-1]
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50_us": float(row["p50 latency"]),
        "p99_us": float(row["p99 latency"]),
    }


WRK_SCRIPT = """
local bodies = {BODIES}
local headers = {HEADERS}
local next_body = 0
request = function()
  next_body = next_body % #bodies + 1
  return wrk.format("POST", nil, headers, bodies[next_body])
end
"""


def _lua_string(data: bytes) -> str:
    """``data`` as a Lua string literal (decimal escapes: any byte, binary included)."""
    return '"' + "".join(f"\\{byte}" for byte in data) + '"'


def wrk(
    url: str,
    model: str,
    concurrency: int,
    seconds: float,
    core: int,
    kind: str,
    tensor_format: str = "json",
) -> dict[str, float]:
    """wrk posting the samples in turn, as v2 JSON bodies or (``binary``) as the binary tensor
    extension's JSON header and raw bytes; any answer but 200 fails the run."""
    shape = [1, *SHAPES[kind]]
    if tensor_format == "binary":
        header = json.dumps(
            {"inputs": [{"name": "INPUT__0", "shape": shape, "datatype": "FP32",
                         "parameters": {"binary_data_size": 4 * int(np.prod(shape))}}],
             "outputs": [{"name": "OUTPUT__0", "parameters": {"binary_data": True}}]}
        ).encode()  # fmt: skip
        bodies = [header + one.tobytes() for one in samples(kind)]
        fields = {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(header)),
        }
    else:
        bodies = [
            json.dumps(
                {"inputs": [{"name": "INPUT__0", "shape": shape, "datatype": "FP32",
                             "data": one.ravel().tolist()}]}
            ).encode()
            for one in samples(kind)
        ]  # fmt: skip
        fields = {"Content-Type": "application/json"}
    lua = WRK_SCRIPT.replace(
        "{BODIES}", "{" + ", ".join(_lua_string(b) for b in bodies) + "}"
    ).replace("{HEADERS}", "{" + ", ".join(f'["{k}"] = "{v}"' for k, v in fields.items()) + "}")
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(lua)
        script.flush()
        command = [
            "taskset", "-c", str(core), "wrk", "-t1", f"-c{concurrency}",
            f"-d{max(int(seconds), 1)}s", "--latency", "-s", script.name, f"http://{url}/v2/models/{model}/infer",
        ]  # fmt: skip
        output = subprocess.run(
            command, check=True, capture_output=True, text=True, timeout=seconds + 60
        ).stdout
    if "Non-2xx" in output or "Socket errors" in output:
        raise RuntimeError(f"wrk saw failed requests:\n{output}")
    latency: dict[str, float] = {}
    throughput = 0.0
    for line in output.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] in ("50%", "99%"):
            latency[fields[0]] = _wrk_us(fields[1])
        elif line.startswith("Requests/sec:"):
            throughput = float(fields[1])
    return {"throughput": throughput, "p50_us": latency["50%"], "p99_us": latency["99%"]}


def _wrk_us(text: str) -> float:
    for unit, scale in (("us", 1.0), ("ms", 1e3), ("s", 1e6)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    raise ValueError(f"unknown wrk latency {text!r}")


GRPC_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"


def grpc_infer_message(model: str, kind: str) -> bytes:
    """One ModelInfer request as it goes on the wire (gRPC's 5-byte prefix, then the protobuf),
    with the first sample as raw input contents, as perf_analyzer sends binary tensors."""
    from tritonclient.grpc import service_pb2 as pb

    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = "INPUT__0", "FP32"
    tensor.shape.extend([1, *SHAPES[kind]])
    request.raw_input_contents.append(samples(kind)[0].tobytes())
    request.outputs.add().name = "OUTPUT__0"
    message = request.SerializeToString()
    return b"\0" + len(message).to_bytes(4, "big") + message


def check_grpc_message(url: str, message: bytes) -> None:
    """The message answered OK by a real gRPC client first: h2load sees HTTP statuses only, and
    a gRPC error comes back as HTTP 200 with its status in the trailers."""
    import grpc
    from tritonclient.grpc import service_pb2 as pb

    with grpc.insecure_channel(url) as channel:
        call = channel.unary_unary(GRPC_INFER_PATH)
        answer = pb.ModelInferResponse.FromString(call(message[5:], timeout=30))
    if not answer.raw_output_contents:
        raise RuntimeError(f"the ModelInfer message got an answer without outputs: {answer}")


def h2load(
    url: str, http_url: str, model: str, message: bytes, concurrency: int, seconds: float, core: int
) -> dict[str, float]:
    """h2load (nghttp2's HTTP/2 load generator) sending one ModelInfer ``message`` (see
    ``check_grpc_message``) over 4 connections: a gRPC client that costs a fraction of
    perf_analyzer's CPU per request, as wrk is for HTTP/1.1. Each answer must be a success the
    model counted."""
    connections = 4 if concurrency % 4 == 0 else 1
    with tempfile.TemporaryDirectory() as folder:
        body, log = Path(folder) / "body", Path(folder) / "log"
        body.write_bytes(message)
        command = [
            "taskset", "-c", str(core), "h2load", "-c", str(connections),
            "-m", str(concurrency // connections), "-D", str(max(int(seconds), 1)),
            "-d", str(body), "-H", "content-type: application/grpc", "-H", "te: trailers",
            "--log-file", str(log), f"http://{url}{GRPC_INFER_PATH}",
        ]  # fmt: skip
        before = model_requests(http_url, model)
        output = subprocess.run(
            command, check=True, capture_output=True, text=True, timeout=seconds + 60
        ).stdout
        counted = model_requests(http_url, model) - before
        rows = [line.split("\t") for line in log.read_text().splitlines() if line]
    ok = [int(row[2]) for row in rows if row[1] == "200"]
    if len(ok) != len(rows) or counted < len(ok):
        raise RuntimeError(
            f"h2load: {len(rows) - len(ok)} answers were not HTTP 200 and the model counted "
            f"{counted} successes for {len(ok)} answers:\n{output}"
        )
    finished = [line for line in output.splitlines() if line.startswith("finished in")]
    if not ok or not finished:
        raise RuntimeError(f"h2load answered nothing or printed no rate:\n{output}")
    p50, p99 = np.percentile(ok, [50, 99])
    return {
        "throughput": float(finished[0].split(",")[1].split()[0]),  # "finished in 4.00s, N req/s"
        "p50_us": float(p50),
        "p99_us": float(p99),
    }


def get_json(url: str, path: str) -> Any:
    with urllib.request.urlopen(f"http://{url}{path}", timeout=10) as reply:
        return json.loads(reply.read())


def model_requests(url: str, model: str) -> int:
    return phase_totals(url, model)["success"][0]


def with_server_cpu(
    server: Server, model: str, measure: Callable[[], dict[str, float]]
) -> dict[str, float]:
    """``measure()``'s figures, plus the server process's CPU microseconds per request answered
    over the whole run (``cpu_us``) and the load generator's (``client_cpu_us``: a server that
    makes its client work harder, e.g. with more frames per answer, is slower under a saturated
    client even at the same server cost), and the server's own time per request in each phase
    (``peers.phase_means``)."""
    cpu, phases = process_cpu_s(server.pid), phase_totals(server.http_url, model)
    client = children_cpu_s()
    start = time.monotonic()
    figures = measure()
    wall = max(time.monotonic() - start, 1e-9)
    client_after = children_cpu_s()
    cpu_after = process_cpu_s(server.pid)
    figures.update(phase_means(phases, phase_totals(server.http_url, model)))
    answered = max(figures["answered"], 1)
    figures["cpu_us"] = (cpu_after - cpu) * 1e6 / answered
    figures["client_cpu_us"] = (client_after - client) * 1e6 / answered
    figures["server_busy"] = (cpu_after - cpu) / wall
    figures["client_busy"] = (client_after - client) / wall
    return figures


# A core this busy has no time left: the side that reaches it first sets the throughput.
SATURATED = 0.95


def bound_by(figures: dict[str, float]) -> str:
    """Which side held the throughput down: the load generator, when it used its whole core
    and the server did not (then the row measures the client, and a ratio between servers
    says only how much work each makes for it); the server, when it used its whole core;
    "neither" when both had time to spare (something waited, e.g. a batching delay)."""
    if figures["client_busy"] >= SATURATED and figures["server_busy"] < SATURATED:
        return "client"
    if figures["server_busy"] >= SATURATED:
        return "server"
    return "neither"


def client_ceiling(figures: dict[str, float]) -> float:
    """The inf/s the load generator could drive with its whole core at the CPU per request it
    spent in this row: no server, however cheap, gets more out of it under this load. A row
    whose target is near this is bounded by the load generator's core, not by the server."""
    return 1e6 / max(figures["client_cpu_us"], 1e-9)


def children_cpu_s() -> float:
    """CPU seconds of the waited-for child processes (the load generators) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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
GOAL = 1.2  # x the peer's throughput


@dataclass(frozen=True, slots=True)
class Scenario:
    """One model asked one way."""

    name: str
    model: str
    generator: str  # "perf_analyzer", "wrk" or "h2load"
    protocol: str = "http"
    tensor_format: str = "binary"

    @property
    def kind(self) -> str:
        return self.model.split("_")[0]


SCENARIOS = (
    Scenario("mlp binary", "mlp_batched", "perf_analyzer"),
    Scenario("mlp json", "mlp_batched", "perf_analyzer", tensor_format="json"),
    Scenario("mlp grpc", "mlp_batched", "perf_analyzer", protocol="grpc"),
    Scenario("mlp wrk json", "mlp_batched", "wrk", tensor_format="json"),
    Scenario("mlp wrk binary", "mlp_batched", "wrk"),
    Scenario("mlp h2load grpc", "mlp_batched", "h2load", protocol="grpc"),
    Scenario("cnn binary", "cnn_batched", "perf_analyzer"),
    Scenario("cnn json", "cnn_batched", "perf_analyzer", tensor_format="json"),
    Scenario("cnn grpc", "cnn_batched", "perf_analyzer", protocol="grpc"),
    Scenario("mlp unbatched", "mlp_plain", "perf_analyzer"),
)


def measure(
    scenario: Scenario, server: Server, binary: str, args: argparse.Namespace, data: dict[str, Path]
) -> dict[str, float]:
    message = b""
    if scenario.generator == "h2load":  # checked before the measurement, not in it
        message = grpc_infer_message(scenario.model, scenario.kind)
        check_grpc_message(server.grpc_url, message)

    def run() -> dict[str, float]:
        if scenario.generator == "wrk":
            return wrk(
                server.http_url, scenario.model, args.concurrency, args.seconds, 1, scenario.kind,
                scenario.tensor_format,
            )  # fmt: skip
        if scenario.generator == "h2load":
            return h2load(
                server.grpc_url, server.http_url, scenario.model, message, args.concurrency,
                args.seconds, 1,
            )  # fmt: skip
        url = server.grpc_url if scenario.protocol == "grpc" else server.http_url
        return perf_analyzer(
            binary, url, scenario.model, args.concurrency, args.seconds, 1, data[scenario.kind],
            scenario.protocol, tensor_format=scenario.tensor_format,
        )  # fmt: skip

    return with_server_cpu(server, scenario.model, run)


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    return max(runs, key=lambda figures: figures["throughput"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--peer", action="append", default=[], choices=PEERS)
    parser.add_argument(
        "--scenarios", nargs="+", choices=[s.name for s in SCENARIOS], metavar="NAME",
        help=f"default: all ({'; '.join(s.name for s in SCENARIOS)})",
    )  # fmt: skip
    parser.add_argument("--floor", action="store_true", help="measure the canned-answer floor")
    parser.add_argument("--baseline", type=Path, help=argparse.SUPPRESS)  # see in_process()
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--retain-host-memory", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--channels-last", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline:
        print(
            baseline(
                args.baseline, args.model, args.seconds, args.retain_host_memory, args.channels_last
            )
        )
        return
    binary = perf_analyzer_path()
    if binary is None:
        sys.exit("perf_analyzer is not installed: set PERF_ANALYZER to its path")
    chosen = [s for s in SCENARIOS if args.scenarios is None or s.name in args.scenarios]
    repository = Path(tempfile.mkdtemp(prefix="ptserve-sched-bench-"))
    write_variants(repository)
    data = write_input_data(repository.parent / f"{repository.name}-data")
    figures: dict[tuple[str, str], list[dict[str, float]]] = {}
    inproc: dict[str, list[float]] = {"plain": [], "retained": [], "channels_last": []}
    floors: list[dict[str, float]] = []
    with servers(repository, "0", args.peer) as running:
        names = [server.name for server in running]
        cnn_file = repository / "cnn_plain" / "1" / "model.pt"
        for repeat in range(args.repeats):
            inproc["plain"].append(in_process(cnn_file, "cnn", args.seconds, retain=False))
            inproc["retained"].append(in_process(cnn_file, "cnn", args.seconds, retain=True))
            inproc["channels_last"].append(
                in_process(cnn_file, "cnn", args.seconds, retain=True, channels_last=True)
            )
            for scenario in chosen:
                for server in running:
                    result = measure(scenario, server, binary, args, data)
                    figures.setdefault((scenario.name, server.name), []).append(result)
                    print(
                        f"repeat {repeat} {scenario.name} {server.name}: "
                        f"{result['throughput']:.0f} inf/s, p50 {result['p50_us']:.0f} us, "
                        f"p99 {result['p99_us']:.0f} us, {result['cpu_us']:.1f} us CPU/request, "
                        f"load generator {result['client_cpu_us']:.1f} us CPU/request; "
                        f"cores busy: server {result['server_busy']:.0%}, "
                        f"load generator {result['client_busy']:.0%}",
                        file=sys.stderr,
                        flush=True,
                    )
            if args.floor:
                found = floor(binary, running[0].http_url, "cnn_batched", data["cnn"])
                if found is not None:
                    floors.append(found)
        histograms = {
            (scenario.model, server.name): histogram(server.http_url, scenario.model)
            for scenario in chosen
            for server in running
        }
    report(chosen, names, figures, inproc, floors, histograms, args)


def _served_ratio(ours: dict[str, float], theirs: dict[str, float]) -> float:
    return ours["throughput"] / theirs["throughput"]


def _cpu_ratio(ours: dict[str, float], theirs: dict[str, float]) -> float:
    return theirs["cpu_us"] / ours["cpu_us"]


def _spread_ratio(ours: dict[str, float], theirs: dict[str, float]) -> float:
    return (ours["p99_us"] / ours["p50_us"]) / (theirs["p99_us"] / theirs["p50_us"])


def side_by_side(
    chosen: list[Scenario], names: list[str], figures: dict[tuple[str, str], list[dict[str, float]]]
) -> str:
    """ptserve / peer, repeat by repeat (both servers measured in turn within each repeat), and
    the median of those ratios. CPU is the peer's server CPU per request over ptserve's (above
    1: ptserve spends less); p99/p50 is ptserve's spread over the peer's (below 1: ptserve's is
    tighter)."""
    lines = [
        "ptserve / peer, repeat by repeat, and the median",
        "| scenario | peer | inf/s ratios | inf/s median | CPU ratios | CPU median "
        "| p99/p50 ratios | p99/p50 median |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scenario in chosen:
        ours = figures[(scenario.name, "ptserve")]
        for peer in names[1:]:
            theirs = figures[(scenario.name, peer)]
            cells: list[str] = []
            for ratio in (_served_ratio, _cpu_ratio, _spread_ratio):
                cells += ratio_cells([ratio(a, b) for a, b in zip(ours, theirs, strict=True)])
            lines.append(f"| {scenario.name} | {peer} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(
    chosen: list[Scenario],
    names: list[str],
    figures: dict[tuple[str, str], list[dict[str, float]]],
    inproc: dict[str, list[float]],
    floors: list[dict[str, float]],
    histograms: dict[tuple[str, str], dict[int, int]],
    args: argparse.Namespace,
) -> None:
    """The best of the repeats, side by side."""
    header = ["scenario"]
    for name in names:
        header += [f"{name} inf/s", f"{name} p50/p99 us", f"{name} p99/p50", f"{name} CPU us/req"]
        header += [f"{name} client CPU us/req", f"{name} client ceiling inf/s"]
        header += [f"{name} busy server/client", f"{name} bound by"]
    header += [f"ptserve / {name}" for name in names[1:]]
    print(f"concurrency {args.concurrency}, best of {args.repeats} x {args.seconds:g} s")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for scenario in chosen:
        row = [scenario.name]
        bests = {name: best(figures[(scenario.name, name)]) for name in names}
        for name in names:
            b = bests[name]
            row += [
                f"{b['throughput']:.0f}",
                f"{b['p50_us']:.0f} / {b['p99_us']:.0f}",
                f"{b['p99_us'] / b['p50_us']:.2f}",
                f"{b['cpu_us']:.1f}",
                f"{b['client_cpu_us']:.1f}",
                f"{client_ceiling(b):.0f}",
                f"{b['server_busy']:.0%} / {b['client_busy']:.0%}",
                bound_by(b),
            ]
        ptserve = bests["ptserve"]["throughput"]
        row += [f"{ptserve / bests[name]['throughput']:.2f}x" for name in names[1:]]
        print("| " + " | ".join(row) + " |")
    if len(names) > 1:
        print()
        for scenario in chosen:
            ceiling = client_ceiling(best(figures[(scenario.name, "ptserve")]))
            for name in names[1:]:
                goal = GOAL * best(figures[(scenario.name, name)])["throughput"]
                print(
                    f"{scenario.name}: {GOAL:g} x {name} = {goal:.0f} inf/s, "
                    f"{goal / ceiling:.0%} of the load generator's ceiling in ptserve's row"
                )
        print()
        print(side_by_side(chosen, names, figures))
    print("\nEach server's own time per request, by phase (its statistics; median of the repeats)")
    rows: dict[tuple[str, ...], list[dict[str, float]]] = {
        (s.name, name): figures[(s.name, name)] for s in chosen for name in names
    }
    print("\n".join(phase_rows(rows, ["scenario", "server"])))
    plain, retained = max(inproc["plain"]), max(inproc["retained"])
    own = max(inproc["channels_last"])
    print(
        f"in-process CNN at batch 32: {plain:.0f} inf/s "
        f"({retained:.0f} with the host memory setting, {own:.0f} with that and channels-last "
        "inputs, as ptserve runs it)"
    )
    for scenario in chosen:
        if scenario.kind != "cnn":
            continue
        shares = ", ".join(
            f"{name} {best(figures[(scenario.name, name)])['throughput'] / plain:.1%}"
            for name in names
        )
        print(f"  {scenario.name} served / in-process batch 32 (target {TARGET:.0%}): {shares}")
        served = best(figures[(scenario.name, "ptserve")])["throughput"]
        print(f"  {scenario.name} ptserve served / its own in-process setup: {served / own:.1%}")
    if floors:
        top = best(floors)
        print(
            f"floor (canned answers, concurrency {FLOOR_CONCURRENCY}): "
            f"{top['throughput']:.0f} req/s, {top['cpu_us']:.1f} us CPU/request"
        )
    for (model, name), counts in sorted(histograms.items()):
        total = sum(counts.values())
        if not total:
            continue
        top_sizes = sorted(counts.items(), key=lambda kv: -kv[1])[:5]
        shown = ", ".join(f"{size}: {count / total:.0%}" for size, count in top_sizes)
        print(f"batch sizes of {model} on {name} ({total} executions): {shown}")


if __name__ == "__main__":
    main()
