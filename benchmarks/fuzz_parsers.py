"""Fuzz the request decoders of both frontends and count the cases tried.

    python -m benchmarks.fuzz_parsers [--cases 20000] [--engine hypothesis|atheris]

hypothesis (the default) draws structured requests from the strategies the property tests use,
plus raw bytes; each case must decode or raise a ServerError with a client status. atheris
(when installed) feeds coverage-guided bytes: an HTTP body with a JSON header length, and a
serialized ModelInferRequest. Failures are counted and the first few printed; the exit status is
1 when there were any.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tests.frontends.grpc.strategies import check_decode as check_grpc
from tests.frontends.grpc.strategies import infer_requests, shm_registry
from tests.frontends.http.test_properties import check_decode as check_http
from tests.frontends.http.test_properties import headers as http_headers
from tritonclient.grpc import service_pb2 as pb

SHOWN = 3  # failures printed per target


class Tally:
    """Cases tried and failures of one target."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cases = 0
        self.failures: list[str] = []
        self.started = time.monotonic()

    def run(self, case: Callable[[], Any]) -> None:
        self.cases += 1
        try:
            case()
        except Exception:  # any exception out of a decoder, or a broken property, is a finding
            if len(self.failures) < 1000:
                self.failures.append(traceback.format_exc(limit=6))

    def report(self) -> str:
        seconds = time.monotonic() - self.started
        lines = [f"{self.name}: {self.cases} cases, {len(self.failures)} failures, {seconds:.1f} s"]
        lines += [f"--- failure {i + 1}:\n{text}" for i, text in enumerate(self.failures[:SHOWN])]
        return "\n".join(lines)


def _grpc_bytes(data: bytes, registry: Any) -> None:
    try:
        message = pb.ModelInferRequest.FromString(data)
    except Exception:  # not protobuf: the server's guard refuses it before the decoder
        return
    check_grpc(message, registry)


def _http_bytes(data: bytes) -> None:
    """The first two bytes pick the JSON header length (or none)."""
    length = int.from_bytes(data[:2], "little") if len(data) >= 2 else None
    body = data[2:]
    check_http(body, None if length is None or length > len(body) + 8 else length)


def hypothesis_targets(cases: int, registry: Any) -> list[Tally]:
    config = settings(
        max_examples=cases,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    tallies: list[Tally] = []

    def target(name: str, strategy: st.SearchStrategy[Any], case: Callable[[Any], None]) -> None:
        tally = Tally(name)
        tallies.append(tally)

        @config
        @given(strategy)
        def run(value: Any) -> None:
            tally.run(lambda: case(value))

        run()
        print(tally.report(), flush=True)

    def http_structured(value: tuple[dict[str, Any], bytes]) -> None:
        header, binary = value
        raw = json.dumps(header).encode()
        check_http(raw + binary, len(raw))
        check_http(raw, None)

    target("http structured", st.tuples(http_headers, st.binary(max_size=80)), http_structured)
    target("http bytes", st.binary(max_size=300), _http_bytes)
    target("grpc structured", infer_requests(), lambda m: check_grpc(m, registry))
    target("grpc bytes", st.binary(max_size=300), lambda b: _grpc_bytes(b, registry))
    return tallies


def atheris_target(name: str, cases: int, registry: Any) -> None:
    """Runs in a child process, which it ends itself after ``cases`` runs (libFuzzer would
    otherwise exit without a word from us)."""
    import atheris

    atheris.instrument_all()  # coverage of the decoders, already imported
    tally = Tally(f"{name} (atheris)")

    def one(data: bytes) -> None:
        if name == "http":
            tally.run(lambda: _http_bytes(data))
        else:
            tally.run(lambda: _grpc_bytes(data, registry))
        if tally.cases >= cases:
            print(tally.report(), flush=True)
            os._exit(1 if tally.failures else 0)

    atheris.Setup([sys.argv[0], "-max_len=4096"], one)
    atheris.Fuzz()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=20000, help="cases per target")
    parser.add_argument("--engine", choices=["hypothesis", "atheris"], default="hypothesis")
    parser.add_argument("--target", choices=["http", "grpc"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        registry = shm_registry(Path(directory))
        if args.target:
            atheris_target(args.target, args.cases, registry)
            return 0
        if args.engine == "atheris":
            failed = False
            for target in ("http", "grpc"):
                command = [sys.executable, "-m", "benchmarks.fuzz_parsers", "--target", target]
                result = subprocess.run(
                    [*command, "--cases", str(args.cases)], capture_output=True, text=True
                )
                report = [line for line in result.stdout.splitlines() if line]
                print("\n".join(report) or result.stderr[-2000:], flush=True)
                failed |= result.returncode != 0 or " 0 failures" not in result.stdout
            return int(failed)
        tallies = hypothesis_targets(args.cases, registry)
        total = sum(t.cases for t in tallies)
        failures = sum(len(t.failures) for t in tallies)
        print(f"total: {total} cases, {failures} failures")
        registry.close()
        return int(failures > 0)


if __name__ == "__main__":
    sys.exit(main())
