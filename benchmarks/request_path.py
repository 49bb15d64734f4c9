"""The whole served request path without a socket: HTTP/1.1 and gRPC side by side in one run.

    python -m benchmarks.request_path [--models mlp cnn] [--requests 20000] [--repeats 2]

Each request's bytes, as a client puts them on the wire (HTTP/1.1 with a binary tensor; a
ModelInfer call as HTTP/2 frames), are handed to the connection's protocol object, and the
answer is taken from a stub transport: parsing, routing, decoding, scheduling, the model, the
answer's encoding and framing all run as served, one request at a time on the caller's core,
with no socket, no client and no wait between requests. A row is the p50 / p90 time from
the bytes to the answer's write, and the model's own phases (the core's statistics). Run it
pinned to one core (``taskset -c 0``) and compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import numpy as np
import uvloop
from tritonclient.grpc import service_pb2 as pb

from benchmarks.scheduling import SHAPES, write_variants
from ptserve.core.server import InferenceServer
from ptserve.embedded.aio import AsyncServer
from ptserve.frontends.grpc.server import MAX_MESSAGE_BYTES, guarded_methods
from ptserve.frontends.http.app import HttpApp
from ptserve.frontends.restrictions import Restrictions
from ptserve.transports.http1 import HttpProtocol
from ptserve.transports.http2.server import NativeGrpcServer

PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


class StubTransport(asyncio.Transport):
    """Takes what the server writes; ``written_ns``: when the last answer went out (a write
    that ``is_answer`` says holds one, not, say, a WINDOW_UPDATE written before it)."""

    def __init__(self, is_answer: Callable[[bytes], bool]) -> None:
        super().__init__()
        self.is_answer = is_answer
        self.written_ns = 0
        self.kept: list[bytes] = []
        self.keep = True

    def write(self, data: Any) -> None:
        now = time.perf_counter_ns()
        data = bytes(data)
        if self.is_answer(data):
            self.written_ns = now
        if self.keep:
            self.kept.append(data)

    def writelines(self, parts: Any) -> None:
        self.write(b"".join(parts))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def http_request(model: str, data: bytes) -> bytes:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT__0",
                    "shape": [1, len(data) // 4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(data)},
                }
            ],
            "outputs": [{"name": "OUTPUT__0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = header + data
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: bench\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def grpc_message(model: str, data: bytes) -> bytes:
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = "INPUT__0", "FP32"
    tensor.shape.extend([1, len(data) // 4])
    request.raw_input_contents.append(data)
    request.outputs.add().name = "OUTPUT__0"
    message: bytes = request.SerializeToString()
    return b"\0" + len(message).to_bytes(4, "big") + message


def ends_a_call(data: bytes) -> bool:
    """Whether the frames written hold a call's trailers (HEADERS with END_STREAM)."""
    position = 0
    while position + 9 <= len(data):
        if data[position + 3] == 0x1 and data[position + 4] & 0x1:
            return True
        position += 9 + int.from_bytes(data[position : position + 3], "big")
    return False


def on_stream(frames: bytes, stream_id: int) -> bytes:
    """The same frames on another stream (HPACK leaves the block unchanged once indexed)."""
    out = bytearray(frames)
    position = 0
    while position < len(out):
        struct.pack_into(">I", out, position + 5, stream_id)
        position += 9 + int.from_bytes(out[position : position + 3], "big")
    return bytes(out)


async def answered(transport: StubTransport, feed: Any, data: bytes) -> int:
    """Nanoseconds from handing ``data`` over to the answer's (last) write."""
    transport.written_ns = 0
    start = time.perf_counter_ns()
    feed(data)
    while not transport.written_ns:
        await asyncio.sleep(0)
    await asyncio.sleep(0)  # (anything the answer left queued runs before the next request)
    return transport.written_ns - start


async def over_http(core: InferenceServer, model: str, data: bytes, count: int) -> list[int]:
    protocol = HttpProtocol(HttpApp(core, 64 << 20, None, None), 64 << 20)
    transport = StubTransport(lambda data: True)  # (HTTP/1.1 writes only answers)
    transport.keep = False
    protocol.connection_made(transport)
    raw = http_request(model, data)
    return [await answered(transport, protocol.data_received, raw) for _ in range(count)]


async def over_grpc(core: InferenceServer, model: str, data: bytes, count: int) -> list[int]:
    native = NativeGrpcServer(guarded_methods(core, Restrictions([])), MAX_MESSAGE_BYTES)
    connection = native._connection()
    transport = StubTransport(ends_a_call)
    connection.connection_made(transport)
    client = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    client.initiate_connection()
    client.increment_flow_control_window(2**31 - 1 - 65535)  # the answers never wait for it
    connection.data_received(client.data_to_send())
    client.receive_data(b"".join(transport.kept))
    connection.data_received(client.data_to_send())
    fields = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
        (b":authority", b"bench"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ]
    message = grpc_message(model, data)
    frames = b""
    for _ in range(2):  # the second call's block is the indexed one every later call repeats
        stream_id = client.get_next_available_stream_id()
        client.send_headers(stream_id, fields)
        client.send_data(stream_id, message, end_stream=True)
        frames = client.data_to_send()
        transport.kept.clear()
        await answered(transport, connection.data_received, frames)
        client.receive_data(b"".join(transport.kept))
        connection.data_received(client.data_to_send())
    transport.keep = False
    times = []
    for _ in range(count):
        stream_id += 2
        times.append(
            await answered(transport, connection.data_received, on_stream(frames, stream_id))
        )
    return times


async def measure(repository: Path, model: str, protocol: str, count: int) -> dict[str, float]:
    name = f"{model}_plain"
    server = AsyncServer(str(repository), model_control_mode="explicit", load_models=[name])
    await server.start()
    try:
        data = np.random.default_rng(0).standard_normal(SHAPES[model], np.float32).tobytes()
        run = over_http if protocol == "http" else over_grpc
        times = sorted((await run(server.core, name, data, count + count // 10))[count // 10 :])
        stats = server.core.statistics(name)["model_stats"][0]["inference_stats"]
        row = {"p50": times[len(times) // 2] / 1000, "p90": times[len(times) * 9 // 10] / 1000}
        for phase in PHASES:
            row[phase] = stats[phase]["ns"] / max(stats[phase]["count"], 1) / 1000
        return row
    finally:
        await server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mlp"], choices=sorted(SHAPES))
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    repository = Path(tempfile.mkdtemp(prefix="ptserve-path-bench-")) / "repo"
    write_variants(repository)
    print("| model | protocol | repeat | p50 µs | p90 µs | " + " | ".join(PHASES) + " (µs) |")
    print("|---|---|---|---|---|" + "---|" * len(PHASES))
    for model in args.models:
        for repeat in range(args.repeats):
            for protocol in ("http", "grpc"):
                row = uvloop.run(measure(repository, model, protocol, args.requests))
                cells = " | ".join(f"{row[phase]:.1f}" for phase in PHASES)
                print(
                    f"| {model} | {protocol} | {repeat} | {row['p50']:.1f} | {row['p90']:.1f} | "
                    f"{cells} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
