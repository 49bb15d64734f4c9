"""perf_analyzer over HTTP and gRPC against the example models, side by side.

Usage: python benchmarks/grpc_vs_http.py [--models mlp cnn] [--concurrency 8] [--seconds 5]
Needs perf_analyzer (``/work/shared/tools/install-perf-analyzer``, or --perf-analyzer PATH).
Starts its own ptserve on free ports, prints one line per model and protocol.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.serverproc import ServerProcess

from ptserve.examples import build_example_repository

DEFAULT_PA = Path.home() / ".cache" / "perf-analyzer" / "perf_analyzer"
_THROUGHPUT = re.compile(r"Throughput: ([\d.]+) infer/sec")
_LATENCY = re.compile(r"Avg latency: (\d+) usec")


def measure(pa: Path, model: str, url: str, protocol: str, concurrency: int, seconds: int) -> str:
    command = [
        str(pa),
        "-m",
        model,
        "-u",
        url,
        "-i",
        protocol,
        "--concurrency-range",
        str(concurrency),
        "--measurement-interval",
        str(seconds * 1000),
        "--stability-percentage",
        "50",
        "--max-trials",
        "4",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout + done.stderr
    throughput = _THROUGHPUT.findall(out)
    latency = _LATENCY.findall(out)
    if done.returncode != 0 or not throughput:
        return f"{model:6} {protocol:5} failed (rc {done.returncode}): {out[-400:]}"
    return (
        f"{model:6} {protocol:5} c={concurrency}: {float(throughput[-1]):9.1f} infer/s, "
        f"avg latency {int(latency[-1]) if latency else -1} us"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--perf-analyzer", type=Path, default=DEFAULT_PA)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        repository = Path(folder)
        build_example_repository(repository)
        with ServerProcess([repository]) as server:
            for model in args.models:
                for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
                    line = measure(
                        args.perf_analyzer, model, url, protocol, args.concurrency, args.seconds
                    )
                    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
