"""Large answers: a model whose output is megabytes, served one request at a time, side by side.

    python -m benchmarks.large_output [--mib 1 4] [--seconds 3] [--repeats 3] [--peer triton]

The model (TorchScript, written here) repeats its [1, 64] FP32 input into an output of
``--mib`` MiB, so nearly all of a request's cost is moving the answer: encoding it, framing it,
writing it. perf_analyzer asks for binary tensors over HTTP and over gRPC, one request at a
time (it keeps every answer of a run in memory, so more in flight would exhaust it with answers
this large); server on core 0, perf_analyzer on core 1. Reported per row: throughput, p50, the
server process's CPU per request, and with ``--peer`` the ptserve / peer ratios repeat by repeat
and their median.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from benchmarks.peers import PEERS, ratio_cells, servers
from benchmarks.scheduling import ONE_THREAD, perf_analyzer, with_server_cpu
from benchmarks.serving import perf_analyzer_path

FLOATS_PER_MIB = (1 << 20) // 4


class Repeat(torch.nn.Module):
    """The input, ``times`` times over: an output as large as asked for, at a copy's cost."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times = times

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.repeat(1, self.times)


def model_name(mib: int) -> str:
    return f"repeat_{mib}mib"


def write_repository(repository: Path, sizes: list[int]) -> None:
    """One model per output size, in a config Triton and ptserve both take."""
    for mib in sizes:
        folder = repository / model_name(mib)
        (folder / "1").mkdir(parents=True)
        times = mib * FLOATS_PER_MIB // 64
        torch.jit.script(Repeat(times)).save(str(folder / "1" / "model.pt"))  # type: ignore[no-untyped-call]
        (folder / "config.pbtxt").write_text(
            'backend: "pytorch"\nmax_batch_size: 0\n'
            'input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [1, 64] }]\n'
            f'output [{{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [1, {times * 64}] }}]\n'
            "instance_group [{ kind: KIND_CPU count: 1 }]\n" + ONE_THREAD + "\n"
        )


def write_input(path: Path) -> Path:
    data = np.random.default_rng(0).standard_normal((1, 64), dtype=np.float32)
    entry = {"INPUT__0": {"content": data.ravel().tolist(), "shape": [1, 64]}}
    path.write_text(json.dumps({"data": [entry]}))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peer", action="append", default=[], choices=PEERS)
    args = parser.parse_args(argv)
    binary = perf_analyzer_path()
    if binary is None:
        sys.exit("perf_analyzer is not installed: set PERF_ANALYZER to its path")
    repository = Path(tempfile.mkdtemp(prefix="ptserve-large-output-")) / "repo"
    write_repository(repository, args.mib)
    data = write_input(repository.parent / "input.json")
    runs: dict[tuple[int, str, str], list[dict[str, float]]] = {}
    with servers(repository, "0", args.peer) as running:
        for _ in range(args.repeats):
            for mib in args.mib:
                model = model_name(mib)
                for protocol in ("http", "grpc"):
                    for server in running:
                        url = server.grpc_url if protocol == "grpc" else server.http_url
                        run = functools.partial(
                            perf_analyzer, binary, url, model, 1, args.seconds, 1, data, protocol
                        )
                        figures = with_server_cpu(server, model, run)
                        runs.setdefault((mib, protocol, server.name), []).append(figures)
                        print(
                            f"{mib} MiB {protocol} {server.name}: "
                            f"{figures['throughput']:.0f} inf/s, p50 {figures['p50_us']:.0f} us, "
                            f"{figures['cpu_us']:.0f} us CPU/request",
                            file=sys.stderr,
                            flush=True,
                        )
    names = ["ptserve", *args.peer]
    print(f"one request at a time, median of {args.repeats} x {args.seconds:g} s")
    print("| output | protocol | server | inf/s | p50 µs | server CPU µs/request |")
    print("|---|---|---|---|---|---|")
    for (mib, protocol, name), repeats in runs.items():
        medians = [
            statistics.median(f[key] for f in repeats) for key in ("throughput", "p50_us", "cpu_us")
        ]
        print(
            f"| {mib} MiB | {protocol} | {name} | " + " | ".join(f"{m:.0f}" for m in medians) + " |"
        )
    if len(names) > 1:
        print("\nptserve / peer, repeat by repeat, and the median (CPU: the peer's over ptserve's)")
        print(
            "| output | protocol | peer | inf/s ratios | inf/s median | CPU ratios | CPU median |"
        )
        print("|---|---|---|---|---|---|---|")
        for mib in args.mib:
            for protocol in ("http", "grpc"):
                ours = runs[(mib, protocol, "ptserve")]
                for peer in names[1:]:
                    theirs = runs[(mib, protocol, peer)]
                    pairs = list(zip(ours, theirs, strict=True))
                    cells = ratio_cells([a["throughput"] / b["throughput"] for a, b in pairs])
                    cells += ratio_cells([b["cpu_us"] / a["cpu_us"] for a, b in pairs])
                    print(f"| {mib} MiB | {protocol} | {peer} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
