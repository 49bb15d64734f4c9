"""The floor: an HTTP server that answers every infer request from memory, with no model.

    python -m benchmarks.floor_server --port 8000 --answers answers.json

What this process spends per request under perf_analyzer (the kernel's socket work and one pass
of the event loop and the HTTP parser) is what any Python server on the same core spends before
it does anything; ``benchmarks.scheduling`` sets it against the per-request budget that its
targets leave. ``answers.json`` maps the paths perf_analyzer reads before it starts (server and
model metadata, model config) to the JSON they return, plus the model's statistics (their counts
follow the requests answered), ``"model"`` and ``"infer"``: the output to answer with (name,
datatype, shape, and its byte size). ``GET /floor`` reports the requests answered and
the process's CPU seconds so far.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any, cast

import httptools
import uvloop


def _response(body: bytes, content_type: str = "application/json", extra: str = "") -> bytes:
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


_ID = b'{"id":"'


class CannedInfer:
    """The infer answer, with the request's id spliced in (perf_analyzer matches answers to
    requests by id); the id is read where perf_analyzer writes it, first in the JSON header."""

    def __init__(self, output: dict[str, Any], model: str) -> None:
        header = json.dumps(
            {
                "id": "",
                "model_name": model,
                "model_version": "1",
                "outputs": [
                    {
                        "name": output["name"],
                        "datatype": output["datatype"],
                        "shape": output["shape"],
                        "parameters": {"binary_data_size": output["byte_size"]},
                    }
                ],
            },
            separators=(",", ":"),
        ).encode()
        self.after_id = header[len(_ID) :]
        self.data = bytes(output["byte_size"])

    def answer(self, body: bytes) -> bytes:
        request_id = b""
        if body.startswith(_ID):
            request_id = body[len(_ID) : body.index(b'"', len(_ID))]
        header_length = len(_ID) + len(request_id) + len(self.after_id)
        return b"".join(
            (
                b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                % (header_length, header_length + len(self.data)),
                _ID,
                request_id,
                self.after_id,
                self.data,
            )
        )


class FloorProtocol(asyncio.Protocol):
    """Parses with httptools and writes the canned answer when a request is complete."""

    answered = 0

    def __init__(
        self,
        answers: dict[str, bytes],
        infer: CannedInfer,
        stats_path: str,
        stats: dict[str, Any],
    ) -> None:
        self.answers = answers
        self.infer = infer
        self.stats_path = stats_path
        self.stats_template = stats
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.first_chunk = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        if not self.first_chunk:
            self.first_chunk = body

    def stats(self) -> dict[str, Any]:
        """The model's statistics with every count at the requests answered (perf_analyzer
        looks for the version whose counts moved during its window)."""
        answered = FloorProtocol.answered
        entry = self.stats_template["model_stats"][0]
        entry["inference_count"] = entry["execution_count"] = answered
        for value in entry["inference_stats"].values():
            value["count"], value["ns"] = answered, answered * 1000
        return self.stats_template

    def on_message_complete(self) -> None:
        path = self.url.decode()
        self.url = b""
        assert self.transport is not None
        if path.endswith("/infer"):
            FloorProtocol.answered += 1
            self.transport.write(self.infer.answer(self.first_chunk))
            self.first_chunk = b""
        elif path == self.stats_path:
            self.transport.write(_response(json.dumps(self.stats()).encode()))
        elif path == "/floor":
            body = {"requests": FloorProtocol.answered, "cpu_s": time.process_time()}
            self.transport.write(_response(json.dumps(body).encode()))
        else:
            self.transport.write(self.answers.get(path, _response(b"{}")))


async def serve(port: int, answers_file: Path) -> None:
    spec = json.loads(answers_file.read_text())
    model = spec.pop("model")
    infer = CannedInfer(spec.pop("infer"), model)
    stats_path = f"/v2/models/{model}/stats"
    stats = spec.pop(stats_path)
    answers = {path: _response(json.dumps(body).encode()) for path, body in spec.items()}
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: FloorProtocol(answers, infer, stats_path, stats), "127.0.0.1", port, backlog=1024
    )
    await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--answers", type=Path, required=True)
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.answers))


if __name__ == "__main__":
    main()
