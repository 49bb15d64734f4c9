"""GPU figures: a ResNet-50-sized CNN served in FP32, FP16 and BF16 at batch 1 and 32, next to
the same module in-process, plus ``torch.compile(mode="reduce-overhead")`` (CUDA graphs) through
the Python runtime. ``fp16-nhwc`` (also ``fp32-nhwc``, ``bf16-nhwc``) is the FP16 model with
``INPUT_MEMORY_FORMAT`` set to ``channels_last``: GPU instances are not probed, so this shows what
the setting is worth on the device (Triton ignores the parameter and serves it NCHW).

    python -m benchmarks.gpu [--out DIR] [--seconds 10] [--device cuda] [--peer triton]
                             [--variants fp32 fp16 bf16 fp16-nhwc compiled] [--small]

Each variant is a model of its own in one repository (``KIND_GPU``, one instance, dynamic
batching up to 32). The load is a raw HTTP/1.1 client on binary tensors (one connection per
request in flight): batch 1 at concurrency 1 gives latency, batch 32 at concurrency 2 gives
throughput. ``--peer triton`` also serves the TorchScript variants with Triton (TRITON_START,
see ``benchmarks.peers``; it needs a CUDA build of Triton's PyTorch backend). ``--small`` shrinks
the network and the image so that the script can be tried on a CPU (``--device cpu``). The
table (markdown) and the raw figures (JSON) go to ``--out`` (default: ``$OUT`` when set).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from benchmarks.peers import PEERS, Pinned, Triton

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
CONFIG_TYPES = {"fp32": "TYPE_FP32", "fp16": "TYPE_FP16", "bf16": "TYPE_BF16"}
WIRE_TYPES = {"fp32": "FP32", "fp16": "FP16", "bf16": "BF16"}
NHWC = "-nhwc"  # a variant suffix: the TorchScript model with INPUT_MEMORY_FORMAT channels_last
CHANNELS_LAST = [f"{precision}{NHWC}" for precision in DTYPES]


def precision(variant: str) -> str:
    """The variant's datatype key: ``fp16-nhwc`` -> ``fp16``."""
    return variant.removesuffix(NHWC)


RESNET_SOURCE = '''
import torch
from torch import nn


class ResNetBlock(nn.Module):
    def __init__(self, inputs: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(inputs, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out),
        )
        self.skip = (
            nn.Sequential(nn.Conv2d(inputs, out, 1, stride, bias=False), nn.BatchNorm2d(out))
            if stride != 1 or inputs != out
            else nn.Identity()
        )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.skip(x))


class ResNet(nn.Module):
    """ResNet-50's shape: bottleneck stages of 3, 4, 6 and 3 blocks, 1000 classes."""

    def __init__(self, blocks=(3, 4, 6, 3), base: int = 64, classes: int = 1000) -> None:
        super().__init__()
        layers = [nn.Conv2d(3, base, 7, 2, 3, bias=False), nn.BatchNorm2d(base),
                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        inputs = base
        for stage, count in enumerate(blocks):
            width = base * 2**stage
            for index in range(count):
                layers.append(ResNetBlock(inputs, width, 2 if index == 0 and stage else 1))
                inputs = width * 4
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(inputs, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))
'''


def resnet(small: bool) -> nn.Module:
    scope: dict[str, Any] = {}
    exec(RESNET_SOURCE, scope)  # the same source is the compiled variant's model.py
    torch.manual_seed(0)
    if small:
        model: nn.Module = scope["ResNet"]((1, 1, 1, 1), 8, 10)
    else:
        model = scope["ResNet"]()
    return model.eval()


def write_repository(
    repository: Path, variants: list[str], device: str, small: bool
) -> tuple[int, int]:
    """The variants' models; returns (image side, classes)."""
    side, classes = (32, 10) if small else (224, 1000)
    kind = "KIND_GPU" if device == "cuda" else "KIND_CPU"
    base = resnet(small)
    for variant in variants:
        dtype = DTYPES.get(precision(variant), torch.float32)
        datatype = CONFIG_TYPES.get(precision(variant), "TYPE_FP32")
        folder = repository / variant / "1"
        folder.mkdir(parents=True)
        common = f"""
            name: "{variant}"
            max_batch_size: 32
            input [ {{ name: "INPUT__0" data_type: {datatype}
                      dims: [ 3, {side}, {side} ] }} ]
            output [ {{ name: "OUTPUT__0" data_type: {datatype}
                       dims: [ {classes} ] }} ]
            instance_group [ {{ count: 1 kind: {kind} }} ]
            dynamic_batching {{ max_queue_delay_microseconds: 500 }}
        """
        if variant == "compiled":
            (folder / "model.py").write_text(textwrap.dedent(RESNET_SOURCE))
            if small:  # the runtime builds the class with no arguments: the small one by default
                source = (folder / "model.py").read_text()
                (folder / "model.py").write_text(
                    source.replace("blocks=(3, 4, 6, 3), base: int = 64, classes: int = 1000",
                                   "blocks=(1, 1, 1, 1), base: int = 8, classes: int = 10")
                )  # fmt: skip
            torch.save(base.state_dict(), folder / "model.pt")
            options = json.dumps(json.dumps({"mode": "reduce-overhead"}))  # a pbtxt string
            extra = f"""
                backend: "pytorch"
                runtime: "model.py"
                parameters {{ key: "TORCH_COMPILE_OPTIONAL_PARAMETERS"
                             value: {{ string_value: {options} }} }}
            """
        else:
            module = resnet(small).to(device=device, dtype=dtype)
            module.load_state_dict(base.state_dict())
            module = module.to(dtype=dtype)
            example = torch.zeros(1, 3, side, side, device=device, dtype=dtype)
            with torch.inference_mode():
                traced = torch.jit.trace(module, example)
            traced.save(str(folder / "model.pt"))
            extra = 'platform: "pytorch_libtorch"'
            if variant.endswith(NHWC):  # (Triton ignores the parameter: its inputs stay NCHW)
                extra += """
                    parameters { key: "INPUT_MEMORY_FORMAT"
                                 value: { string_value: "channels_last" } }
                """
        (repository / variant / "config.pbtxt").write_text(
            textwrap.dedent(common) + textwrap.dedent(extra)
        )
    return side, classes


def in_process(
    variant: str, device: str, side: int, batch: int, seconds: float, small: bool
) -> dict[str, float]:
    dtype = DTYPES.get(precision(variant), torch.float32)
    module = resnet(small).to(device=device, dtype=dtype)
    if variant == "compiled":
        module = torch.compile(module, mode="reduce-overhead")  # type: ignore[assignment]
    data = torch.randn(batch, 3, side, side, device=device).to(dtype)
    if variant.endswith(NHWC):
        data = data.contiguous(memory_format=torch.channels_last)
    times: list[float] = []
    with torch.inference_mode():
        for _ in range(10):
            module(data)
        sync(device)
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            module(data)
            sync(device)
            times.append(time.perf_counter() - start)
    times.sort()
    return {
        "p50_ms": times[len(times) // 2] * 1e3,
        "p99_ms": times[int(len(times) * 0.99)] * 1e3,
        "throughput": batch * len(times) / sum(times),
    }


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def request_bytes(variant: str, batch: int, side: int) -> bytes:
    """One HTTP request with a binary tensor of random values in the variant's datatype."""
    values = np.random.default_rng(0).standard_normal((batch, 3, side, side), dtype=np.float32)
    if precision(variant) == "bf16":
        raw = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    elif precision(variant) == "fp16":
        raw = values.astype(np.float16).tobytes()
    else:
        raw = values.tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT__0",
                    "shape": [batch, 3, side, side],
                    "datatype": WIRE_TYPES.get(precision(variant), "FP32"),
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": "OUTPUT__0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    head = (
        f"POST /v2/models/{variant}/infer HTTP/1.1\r\nHost: bench\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\n"
        f"Content-Length: {len(header) + len(raw)}\r\n\r\n"
    ).encode()
    return head + header + raw


def served(
    url: str, variant: str, batch: int, concurrency: int, seconds: float, side: int
) -> dict[str, float]:
    """Requests of ``batch`` rows from ``concurrency`` connections for ``seconds``."""
    payload = request_bytes(variant, batch, side)
    host, port = url.split(":")
    latencies: list[float] = []
    lock = threading.Lock()
    failures: list[str] = []

    def loop(deadline: float) -> None:
        mine: list[float] = []
        with socket.create_connection((host, int(port))) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                status, body = exchange(sock, payload)
                if status != 200:
                    failures.append(f"HTTP {status}: {body[:400]!r}")
                    return
                mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)

    with socket.create_connection((host, int(port))) as warm:  # first calls may compile
        for _ in range(3):
            exchange(warm, payload)
    deadline = time.perf_counter() + seconds
    threads = [threading.Thread(target=loop, args=(deadline,)) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures or not latencies:
        raise RuntimeError(f"{variant}: requests failed: {failures[:3]}")
    latencies.sort()
    return {
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
        "throughput": batch * len(latencies) / seconds,
    }


def exchange(sock: socket.socket, payload: bytes) -> tuple[int, bytes]:
    """Send one request, read its whole answer; returns the HTTP status and the body."""
    sock.sendall(payload)
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buffer += chunk
    head, _, body = buffer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(1 << 20)
    return int(lines[0].split()[1]), body


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=os.environ.get("OUT"))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=[*DTYPES, *CHANNELS_LAST, "compiled"],
        default=[*DTYPES, "fp16-nhwc", "compiled"],
    )
    parser.add_argument("--peer", action="append", default=[], choices=PEERS)
    parser.add_argument("--small", action="store_true", help="a small network, to try on a CPU")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: run on a GPU machine, or try it with --device cpu --small")
    repository = Path(tempfile.mkdtemp(prefix="ptserve-gpu-"))
    side, _ = write_repository(repository, args.variants, args.device, args.small)
    rows: list[dict[str, Any]] = []
    cases = ((1, 1), (32, 2))  # (batch, concurrency)
    with Pinned([repository], ",".join(map(str, sorted(os.sched_getaffinity(0))))) as ptserve:
        for variant in args.variants:
            for batch, concurrency in cases:
                base = in_process(variant, args.device, side, batch, args.seconds / 2, args.small)
                result = served(ptserve.http_url, variant, batch, concurrency, args.seconds, side)
                rows.append({"variant": variant, "batch": batch, "server": "ptserve",
                             "in_process": base, **result})  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    if args.peer:
        traced = [v for v in args.variants if v != "compiled"]
        cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
        explicit = ["--model-control-mode=explicit", *(f"--load-model={v}" for v in traced)]
        with Triton(repository, cores, explicit) as triton:
            for variant in traced:
                for batch, concurrency in cases:
                    result = served(
                        triton.http_url, variant, batch, concurrency, args.seconds, side
                    )
                    rows.append({"variant": variant, "batch": batch, "server": "triton", **result})
                    print(json.dumps(rows[-1]), flush=True)
    table = render(rows, args.device)
    print(table)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu.md").write_text(table)
        (args.out / "gpu.json").write_text(json.dumps(rows, indent=1))


def render(rows: list[dict[str, Any]], device: str) -> str:
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    lines = [
        f"device: {name}, torch {torch.__version__}",
        "",
        "| variant | batch | server | served p50 ms | served p99 ms | served inf/s "
        "| in-process p50 ms | in-process inf/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        base = row.get("in_process")
        inproc = f"{base['p50_ms']:.2f} | {base['throughput']:.0f}" if base else "- | -"
        lines.append(
            f"| {row['variant']} | {row['batch']} | {row['server']} | {row['p50_ms']:.2f} | "
            f"{row['p99_ms']:.2f} | {row['throughput']:.0f} | {inproc} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
