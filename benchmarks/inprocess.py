"""In-process API overhead: ``server.model(...).infer(...)`` next to calling the TorchScript
module directly, side by side in one run.

    python -m benchmarks.inprocess [--models mlp cnn] [--batch 1 32] [--requests 2000]
                                   [--repeats 5]

Every way of asking runs the same TorchScript file on the same inputs, one request at a time,
at one intra-op thread (the model's ``INTRA_OP_THREAD_COUNT``; ``torch.set_num_threads`` for the
direct call) and one inter-op thread:

- ``direct``: ``module(x)`` under ``torch.inference_mode()``, the floor;
- ``sync numpy`` / ``sync torch``: ``ptserve.Server``, whose calls hop to the server's event
  loop thread and back;
- ``async``: ``ptserve.AsyncServer`` awaited on the caller's own event loop (no thread hop).

Each repeat measures every way in turn, ``--requests`` calls each after a warm-up; a row is the
best repeat's mean per request. The overhead is the row's time less ``direct``'s, the ratio the
row's time over it. Figures from a shared machine drift between runs: compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import torch

import ptserve
from ptserve.examples import CNN_CONFIG, MLP_CONFIG, cnn, mlp, trace, write_model

SHAPES = {"mlp": (64,), "cnn": (3, 32, 32)}
MODULES = {"mlp": mlp, "cnn": cnn}
CONFIGS = {"mlp": MLP_CONFIG, "cnn": CNN_CONFIG}
ONE_THREAD = """
    instance_group [ { count: 1 kind: KIND_CPU } ]
    parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }
"""
WAYS = ("direct", "sync numpy", "sync torch", "async")


def build(repository: Path, models: list[str]) -> None:
    for name in models:
        example = torch.zeros(1, *SHAPES[name])
        write_model(
            repository, name, CONFIGS[name] + ONE_THREAD, {1: trace(MODULES[name](), example)}
        )


def timed(call: Callable[[], object], requests: int) -> float:
    """Mean seconds per call after a warm-up."""
    for _ in range(min(200, requests)):
        call()
    start = time.perf_counter()
    for _ in range(requests):
        call()
    return (time.perf_counter() - start) / requests


async def timed_async(call: Callable[[], Awaitable[object]], requests: int) -> float:
    for _ in range(min(200, requests)):
        await call()
    start = time.perf_counter()
    for _ in range(requests):
        await call()
    return (time.perf_counter() - start) / requests


def measure(
    repository: Path, name: str, batch: int, requests: int, repeats: int
) -> dict[str, float]:
    """The best mean seconds per request of each way."""
    module = torch.jit.load(str(repository / name / "1" / "model.pt"))
    x_numpy = np.random.default_rng(0).standard_normal((batch, *SHAPES[name]), dtype=np.float32)
    x_torch = torch.from_numpy(x_numpy)
    inputs_numpy = {"INPUT__0": x_numpy}
    inputs_torch = {"INPUT__0": x_torch}

    def direct() -> object:
        with torch.inference_mode():
            return module(x_torch)

    best = dict.fromkeys(WAYS, float("inf"))
    with ptserve.Server(model_repository=repository) as server:
        model = server.model(name)
        expected = direct()
        assert isinstance(expected, torch.Tensor)
        np.testing.assert_allclose(
            model.infer(inputs_numpy)["OUTPUT__0"], expected.numpy(), rtol=1e-4, atol=1e-5
        )

        async def in_loop() -> float:
            async with ptserve.AsyncServer(repository) as aio:
                handle = aio.model(name)
                return await timed_async(lambda: handle.infer(inputs_numpy), requests)

        for _ in range(repeats):
            times = {
                "direct": timed(direct, requests),
                "sync numpy": timed(lambda: model.infer(inputs_numpy), requests),
                "sync torch": timed(lambda: model.infer(inputs_torch), requests),
                "async": asyncio.run(in_loop()),
            }
            for way, seconds in times.items():
                best[way] = min(best[way], seconds)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(SHAPES), default=["mlp"])
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        repository = Path(folder)
        build(repository, args.models)
        for name in args.models:
            for batch in args.batch:
                best = measure(repository, name, batch, args.requests, args.repeats)
                floor = best["direct"]
                for way in WAYS:
                    rows.append(
                        f"| {name} | {batch} | {way} | {best[way] * 1e6:.1f} | "
                        f"{(best[way] - floor) * 1e6:+.1f} | {best[way] / floor:.2f} |"
                    )
    print(
        f"\nIn-process API vs. the TorchScript module, best of {args.repeats} x "
        f"{args.requests} sequential requests:\n"
    )
    print("| model | batch | way | µs/request | overhead µs | ratio |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
