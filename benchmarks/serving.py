"""Serving overhead: the example MLP and CNN served over HTTP and gRPC vs. in-process, and
side by side with a peer.

    python -m benchmarks.serving [--repository DIR] [--concurrency 1 8] [--seconds 5]
                                 [--protocols http grpc grpc-aio] [--peer triton]
                                 [--repeats 1] [--trace]

The servers run on core 0 and the load generator on core 1 (``taskset``). ``--peer triton``
also measures Triton with its LibTorch backend on the same models (see ``benchmarks.peers``),
in turn with ptserve in every repeat; each row is the best of ``--repeats`` (by p50 at
concurrency 1, by throughput above), and a last table gives ptserve / peer repeat by repeat
with the median of those ratios, the verdict to quote.

Uses perf_analyzer (binary tensors) when it is installed (``PERF_ANALYZER`` or
``~/.cache/perf-analyzer/perf_analyzer``), else a built-in tritonclient load loop. Figures are
reported side by side from one run, since absolute numbers on a shared machine drift.
``grpc`` is the default (native) gRPC transport; ``grpc-aio`` measures ``--grpc-transport=aio``
on a second server process.

``--trace`` also measures a second ptserve that traces every request (``--trace-config
mode=opentelemetry,rate=1``) and exports its spans to an OTLP/HTTP receiver in this process,
in turn with the untraced one in every repeat, and ends with a table of what tracing costs a
request: p50 and throughput with tracing off and on, their ratios, and the spans the receiver
decoded per request served (6 when none were dropped).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import io
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.peers import PEERS, Pinned, phase_rows, ratio_cells, servers, with_phases
from ptserve.examples import build_example_repository

TRACED = "ptserve+trace"
EXPORT_DELAY_MS = 200  # bsp_schedule_delay of the traced server


def trace_args(url: str) -> list[str]:
    """Every request traced and exported to ``url``; a queue large enough that the measured
    cost is that of exporting every span, not of dropping them (the export batches keep the
    SDK's default size)."""
    settings = [
        "mode=opentelemetry",
        "level=TIMESTAMPS",
        "rate=1",
        "count=-1",
        f"opentelemetry,url={url}",
        f"opentelemetry,bsp_schedule_delay={EXPORT_DELAY_MS}",
        "opentelemetry,bsp_max_queue_size=65536",
    ]
    return [flag for item in settings for flag in ("--trace-config", item)]


def requests_served(metrics_url: str, model: str) -> float:
    """The server's count of successful requests for ``model`` (its metrics port)."""
    with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    match = re.search(
        rf'^nv_inference_request_success{{model="{re.escape(model)}",version="1"}} (\S+)$',
        text,
        re.M,
    )
    return float(match.group(1)) if match else 0.0


SHAPES = {"mlp": (64,), "cnn": (3, 32, 32)}


def perf_analyzer_path() -> str | None:
    candidate = os.environ.get("PERF_ANALYZER") or str(
        Path.home() / ".cache" / "perf-analyzer" / "perf_analyzer"
    )
    return candidate if Path(candidate).is_file() else shutil.which("perf_analyzer")


def in_process(repository: Path, model: str, seconds: float) -> dict[str, float]:
    """Batch-1 latency of the TorchScript file called directly, as the server would call it."""
    module = torch.jit.load(str(repository / model / "1" / "model.pt"))
    module.eval()
    data = torch.from_numpy(
        np.random.default_rng(0).standard_normal((1, *SHAPES[model]), dtype=np.float32)
    )
    latencies: list[float] = []
    with torch.inference_mode():
        for _ in range(50):
            module(data)
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter_ns()
            module(data)
            latencies.append((time.perf_counter_ns() - start) / 1000)
        # The same call after the processor idled for a while, as it does between the requests
        # of one client: caches and idle states make it several times slower than back-to-back.
        idle: list[float] = []
        for _ in range(min(2000, int(seconds * 500))):
            time.sleep(0.0005)
            start = time.perf_counter_ns()
            module(data)
            idle.append((time.perf_counter_ns() - start) / 1000)
    latencies.sort()
    idle.sort()
    return {
        "p50_us": latencies[len(latencies) // 2],
        "p99_us": latencies[int(len(latencies) * 0.99)],
        "throughput": len(latencies) / seconds,
        "idle_p50_us": idle[len(idle) // 2],
    }


def served_perf_analyzer(
    binary: str, url: str, model: str, concurrency: int, seconds: float, protocol: str
) -> dict[str, float]:
    with tempfile.NamedTemporaryFile(suffix=".csv") as report:
        command = [
            "taskset",
            "-c",
            "1",
            binary,
            "-m",
            model,
            "-u",
            url,
            "-i",
            protocol,
            "-b",
            "1",
            "--concurrency-range",
            str(concurrency),
            "--measurement-interval",
            str(int(seconds * 1000)),
            "--stability-percentage",
            "50",
            "-f",
            report.name,
        ]
        subprocess.run(command, check=True, capture_output=True, timeout=seconds * 20 + 60)
        rows = list(csv.DictReader(io.StringIO(Path(report.name).read_text())))
    row = rows[-1]
    return {
        "p50_us": float(row["p50 latency"]),
        "p99_us": float(row["p99 latency"]),
        "throughput": float(row["Inferences/Second"]),
    }


def served_builtin(url: str, model: str, concurrency: int, seconds: float) -> dict[str, float]:
    import tritonclient.http as httpclient

    latencies: list[float] = []
    lock = threading.Lock()
    data = np.random.default_rng(0).standard_normal((1, *SHAPES[model]), dtype=np.float32)
    deadline = time.perf_counter() + seconds

    def loop() -> None:
        client = httpclient.InferenceServerClient(url)
        tensor = httpclient.InferInput("INPUT__0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data, binary_data=True)
        output = httpclient.InferRequestedOutput("OUTPUT__0", binary_data=True)
        for _ in range(20):
            client.infer(model, [tensor], outputs=[output])
        mine: list[float] = []
        while time.perf_counter() < deadline:
            start = time.perf_counter_ns()
            client.infer(model, [tensor], outputs=[output])
            mine.append((time.perf_counter_ns() - start) / 1000)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=loop) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies.sort()
    return {
        "p50_us": statistics.median(latencies),
        "p99_us": latencies[int(len(latencies) * 0.99)],
        "throughput": len(latencies) / seconds,
    }


def better(a: dict[str, float] | None, b: dict[str, float], concurrency: int) -> dict[str, float]:
    """The better of two runs: the lower p50 at concurrency 1, else the higher throughput."""
    if a is None:
        return b
    if concurrency == 1:
        return a if a["p50_us"] <= b["p50_us"] else b
    return a if a["throughput"] >= b["throughput"] else b


def side_by_side(
    model: str,
    protocol: str,
    concurrency: int,
    peer: str,
    ours: list[dict[str, float]],
    theirs: list[dict[str, float]],
) -> str:
    """A row of ptserve / peer ratios, one per repeat, and their median."""
    cells: list[str] = []
    for field in ("p50_us", "p99_us", "throughput"):
        cells += ratio_cells(
            [a[field] / b[field] for a, b in zip(ours, theirs, strict=False) if b[field]]
        )
    return f"| {model} | {protocol} | {concurrency} | {peer} | " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, help="example repository (built if absent)")
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--protocols", nargs="+", choices=["http", "grpc", "grpc-aio"], default=["http"]
    )
    parser.add_argument("--peer", action="append", default=[], choices=PEERS)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument("--builtin", action="store_true", help="do not use perf_analyzer")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="also measure a ptserve started with these extra arguments, in the same rounds "
        "(e.g. 'no-poll=--idle-poll-us=0'); repeatable",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also measure ptserve with every request traced (OpenTelemetry), and the cost",
    )
    args = parser.parse_args(argv)

    repository = args.repository or Path(tempfile.mkdtemp(prefix="ptserve-bench-"))
    if not (repository / "mlp").is_dir():
        build_example_repository(repository)
    torch.set_num_threads(args.threads)
    analyzer = None if args.builtin else perf_analyzer_path()
    if args.peer and analyzer is None:
        raise SystemExit("--peer needs perf_analyzer (set PERF_ANALYZER)")
    print(
        f"load generator: {analyzer or 'built-in tritonclient loop'}; torch threads: "
        f"{args.threads}; best of {args.repeats}",
        file=sys.stderr,
    )
    print(
        "| model | server | protocol | concurrency | served p50 µs | served p99 µs | served inf/s "
        "| in-process p50 µs | in-process p50 after idle µs | in-process inf/s "
        "| p50 overhead µs |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    peer_args = ["--model-control-mode=explicit", *(f"--load-model={m}" for m in args.models)]
    with contextlib.ExitStack() as stack:
        running = stack.enter_context(servers(repository, "0", args.peer, peer_args=peer_args))
        targets: list[tuple[str, str, Any]] = []  # (server name, protocol, server)
        for server in running:
            for protocol in args.protocols:
                if protocol == "grpc-aio":
                    continue
                targets.append((server.name, protocol, server))
        if "grpc-aio" in args.protocols:
            aio = stack.enter_context(Pinned([repository], "0", ["--grpc-transport=aio"]))
            targets.append(("ptserve", "grpc-aio", aio))
        for variant in args.variant:
            name, _, extra = variant.partition("=")
            started = stack.enter_context(Pinned([repository], "0", shlex.split(extra)))
            targets += [(name, p, started) for p in args.protocols if p != "grpc-aio"]
        receiver: Any = None
        if args.trace:
            # The receiver needs the optional OpenTelemetry packages (ptserve[otel]).
            from tests.otlp import OtlpReceiver

            # On the load generator's core, so that decoding spans takes nothing from the server.
            receiver = stack.enter_context(OtlpReceiver(keep=False, cores={1}))
            traced = stack.enter_context(Pinned([repository], "0", trace_args(receiver.url)))
            targets += [(TRACED, p, traced) for p in args.protocols if p != "grpc-aio"]
        costs: list[str] = []  # the rows of the tracing table
        pairs: list[str] = []  # the rows of the side-by-side table (peers only)
        spans_per_request: dict[tuple[str, str, int], float] = {}
        phases: dict[tuple[str, ...], list[dict[str, float]]] = {}  # every repeat's, per row
        for model in args.models:
            for concurrency in args.concurrency:
                baseline = in_process(repository, model, args.seconds)
                found: dict[tuple[str, str], dict[str, float]] = {}
                runs: dict[tuple[str, str], list[dict[str, float]]] = {}  # every repeat's
                for _ in range(args.repeats):
                    for name, protocol, target in targets:
                        wire = "http" if protocol == "http" else "grpc"
                        url = target.http_url if wire == "http" else target.grpc_url
                        if name == TRACED and receiver is not None:
                            spans_before = receiver.received
                            served_before = requests_served(target.metrics_url, model)
                        run: Callable[[], dict[str, float]]
                        if analyzer:
                            run = functools.partial(
                                served_perf_analyzer,
                                analyzer, url, model, concurrency, args.seconds, wire,
                            )  # fmt: skip
                        elif protocol == "http":
                            run = functools.partial(
                                served_builtin, url, model, concurrency, args.seconds
                            )
                        else:
                            raise SystemExit("the gRPC measurement needs perf_analyzer")
                        served = with_phases(target.http_url, model, run)
                        key = (name, protocol)
                        found[key] = better(found.get(key), served, concurrency)
                        runs.setdefault(key, []).append(served)
                        if name == TRACED and receiver is not None:
                            time.sleep(3 * EXPORT_DELAY_MS / 1000)  # the last export arrives
                            count = requests_served(target.metrics_url, model) - served_before
                            spans = receiver.received - spans_before
                            spans_per_request[(model, protocol, concurrency)] = spans / max(
                                count, 1
                            )
                for (name, protocol), served in found.items():
                    print(
                        f"| {model} | {name} | {protocol} | {concurrency} | "
                        f"{served['p50_us']:.0f} | {served['p99_us']:.0f} | "
                        f"{served['throughput']:.0f} | {baseline['p50_us']:.0f} | "
                        f"{baseline['idle_p50_us']:.0f} | {baseline['throughput']:.0f} | "
                        f"{served['p50_us'] - baseline['p50_us']:.0f} |",
                        flush=True,
                    )
                for (name, protocol), repeats in runs.items():
                    phases[(model, name, protocol, str(concurrency))] = repeats
                for peer in args.peer:
                    for protocol in args.protocols:
                        ours, theirs = runs.get(("ptserve", protocol)), runs.get((peer, protocol))
                        if ours and theirs:
                            pairs.append(
                                side_by_side(model, protocol, concurrency, peer, ours, theirs)
                            )
                for protocol in args.protocols:
                    off, on = found.get(("ptserve", protocol)), found.get((TRACED, protocol))
                    if off is None or on is None:
                        continue
                    costs.append(
                        f"| {model} | {protocol} | {concurrency} | {off['p50_us']:.0f} | "
                        f"{on['p50_us']:.0f} | {on['p50_us'] / off['p50_us']:.3f} | "
                        f"{on['p50_us'] - off['p50_us']:.0f} | {off['throughput']:.0f} | "
                        f"{on['throughput']:.0f} | {on['throughput'] / off['throughput']:.3f} | "
                        f"{spans_per_request.get((model, protocol, concurrency), 0.0):.2f} |"
                    )
        if pairs:
            print(
                "\nptserve / peer, repeat by repeat (each repeat measures both in turn; below 1 is "
                "ptserve's lower latency, above 1 its higher throughput), and the median:\n"
            )
            print(
                "| model | protocol | concurrency | peer | p50 ratios | p50 median | p99 ratios "
                "| p99 median | inf/s ratios | inf/s median |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|")
            for row in pairs:
                print(row, flush=True)
        print(
            "\nEach server's own time per request, by phase (its statistics extension; median "
            "of the repeats; the phases a request spends in the core, not in the frontend):\n"
        )
        print("\n".join(phase_rows(phases, ["model", "server", "protocol", "concurrency"])))
        if costs:
            print("\nTracing every request (OpenTelemetry, OTLP/HTTP export), side by side:\n")
            print(
                "| model | protocol | concurrency | p50 off µs | p50 on µs | p50 on/off "
                "| p50 cost µs | inf/s off | inf/s on | inf/s on/off | spans per request |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            for row in costs:
                print(row, flush=True)


if __name__ == "__main__":
    main()
