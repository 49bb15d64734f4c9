"""Throughput by server cores: 1, 2, 4, 8 cores with as many model instances, ptserve and a peer.

    python -m benchmarks.scaling [--cores 1 2 4 8] [--seconds 5] [--repeats 2]
                                 [--models mlp cnn] [--peer triton] [--out DIR]

For each core count N the servers run on cores 0..N-1 (``taskset``) with N CPU instances of the
model (one intra-op thread each; dynamic batching up to 32, 1 ms delay) and perf_analyzer runs on
the next N cores (at least one) at 32 requests in flight per server core. A point is measured
only when the machine has the 2N cores it needs, so on a two-core machine only N = 1 runs; the
same command measures the whole curve on a bigger machine. The table (markdown) and the raw
figures (JSON) are written to ``--out`` (default: ``$OUT`` when set), and printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.peers import PEERS, servers
from benchmarks.scheduling import (
    BATCHED,
    ONE_THREAD,
    perf_analyzer,
    with_server_cpu,
    write_input_data,
)
from benchmarks.serving import perf_analyzer_path
from ptserve.examples import CNN_CONFIG, MLP_CONFIG, build_example_repository

PER_CORE_CONCURRENCY = 32


def write_repository(repository: Path, instances: int, models: list[str]) -> None:
    """``<model>_batched`` with ``instances`` CPU instances, for each model."""
    examples = repository.parent / f"{repository.name}-examples"
    if not examples.is_dir():
        build_example_repository(examples)
    configs = {"mlp": MLP_CONFIG, "cnn": CNN_CONFIG}
    for model in models:
        name = f"{model}_batched"
        folder = repository / name / "1"
        folder.mkdir(parents=True)
        (folder / "model.pt").write_bytes((examples / model / "1" / "model.pt").read_bytes())
        text = configs[model].replace(f'name: "{model}"', f'name: "{name}"')
        group = f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]"
        (repository / name / "config.pbtxt").write_text(
            f"{text}\n{group}\n{ONE_THREAD}\n{BATCHED}\n"
        )


def core_list(first: int, count: int) -> str:
    return ",".join(str(core) for core in range(first, first + count))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--models", nargs="+", choices=["mlp", "cnn"], default=["mlp", "cnn"])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--peer", action="append", default=[], choices=PEERS)
    parser.add_argument("--out", type=Path, default=os.environ.get("OUT"))
    args = parser.parse_args(argv)
    binary = perf_analyzer_path()
    if binary is None:
        sys.exit("perf_analyzer is not installed: set PERF_ANALYZER to its path")
    available = len(os.sched_getaffinity(0))
    work = Path(tempfile.mkdtemp(prefix="ptserve-scaling-"))
    data = write_input_data(work / "data")
    points: list[dict[str, Any]] = []
    for cores in args.cores:
        if 2 * cores > available:
            print(f"{cores} server core(s): skipped, {2 * cores} cores needed, {available} here")
            continue
        repository = work / f"repo-{cores}"
        write_repository(repository, cores, args.models)
        load_cores = core_list(cores, cores)
        with servers(repository, core_list(0, cores), args.peer) as running:
            for model in args.models:
                name = f"{model}_batched"
                best: dict[str, dict[str, float]] = {}
                for _ in range(args.repeats):
                    for server in running:

                        def run(
                            server: Any = server,
                            name: str = name,
                            concurrency: int = PER_CORE_CONCURRENCY * cores,
                            load_cores: str = load_cores,
                            samples: Path = data[model],
                        ) -> dict[str, float]:
                            return perf_analyzer(
                                binary, server.http_url, name, concurrency, args.seconds,
                                load_cores, samples,
                            )  # fmt: skip

                        figures = with_server_cpu(server, name, run)
                        kept = best.get(server.name)
                        if kept is None or figures["throughput"] > kept["throughput"]:
                            best[server.name] = figures
                for server_name, figures in best.items():
                    point = {"cores": cores, "model": model, "server": server_name, **figures}
                    points.append(point)
                    print(json.dumps(point), flush=True)
    table = render(points)
    print(table)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scaling.md").write_text(table)
        (args.out / "scaling.json").write_text(json.dumps(points, indent=1))


def render(points: list[dict[str, Any]]) -> str:
    lines = [
        "| model | server | cores | inf/s | inf/s per core | vs 1 core | p50 us | p99 us "
        "| CPU us/request |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    single = {(p["model"], p["server"]): p["throughput"] for p in points if p["cores"] == 1}
    for p in sorted(points, key=lambda p: (p["model"], p["server"], p["cores"])):
        one = single.get((p["model"], p["server"]))
        ratio = f"{p['throughput'] / one:.2f}x" if one else "-"
        lines.append(
            f"| {p['model']} | {p['server']} | {p['cores']} | {p['throughput']:.0f} | "
            f"{p['throughput'] / p['cores']:.0f} | {ratio} | {p['p50_us']:.0f} | "
            f"{p['p99_us']:.0f} | {p['cpu_us']:.1f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
