"""Interop with an independent gRPC implementation: Node's ``@grpc/grpc-js`` drives the real
server's gRPC port, on both transports (``--grpc-transport native`` and ``aio``).

``grpc_js/interop.js`` runs every named case once per server and prints one JSON line each
(name, ok, details); each case is one test here, which asserts that the case passed and checks
the values, status codes and messages it reported (against numbers computed here, or what
grpcio sees from the same server). The service definitions reach Node as a FileDescriptorSet
built from tritonclient's compiled descriptors (``tests/interop/descriptors.py``).

Skipped without ``node``; with node but without ``grpc_js/node_modules`` every case fails,
saying to run ``make install-test``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

import ptserve
from ptserve.examples import mlp, write_model
from tests.frontends.grpc.certs import make_ca, make_leaf
from tests.interop.descriptors import write_descriptor_set
from tests.models import Identity, identity_config, write_sleepy
from tests.serverproc import ServerProcess

NODE = shutil.which("node")
PROJECT = Path(__file__).parent / "grpc_js"
SCRIPT = PROJECT / "interop.js"
PACKAGES = ("@grpc/grpc-js", "@grpc/proto-loader")
TRANSPORTS = ("native", "aio")
RUN_TIMEOUT_S = 300

UNKNOWN_MODEL = "Request for unknown model: 'no_such_model' is not found"

# The script's cases, in the order it runs them.
CASES = (
    "ServerLive",
    "ServerReady",
    "ServerMetadata",
    "ModelMetadata",
    "ModelConfig",
    "ModelReady",
    "ModelReadyUnknown",
    "ModelInferRaw",
    "ModelInferTyped",
    "ModelInferMlpBatch",
    "ModelInferVersioned",
    "ModelInferString",
    "ModelInferUnknownModel",
    "ModelInferWrongShape",
    "ModelInferWrongDatatype",
    "LargeMessage64MiB",
    "LargeMessage100MiB",
    "StreamInfer1000",
    "StreamSomeBad",
    "StreamHalfClose",
    "StreamCancel",
    "DeadlineExceeded",
    "ConcurrentCalls500",
    "ManyChannels",
    "MetadataRoundTrip",
    "GzipRequests",
    "DeflateRequests",
    "CompressionOnTheWire",
    "KeepaliveIdle",
    "KeepaliveDuringCall",
    "TlsServerLive",
    "TlsUntrustedCertificate",
    "RepositoryIndex",
    "ModelStatistics",
    "HealthCheck",
    "HealthWatch",
    "UnknownMethod",
)
TLS_CASES = ("TlsServerLive", "TlsUntrustedCertificate")

pytestmark = pytest.mark.skipif(
    NODE is None, reason="needs Node.js: no `node` on PATH to run the @grpc/grpc-js client"
)


def _check_node_modules() -> None:
    """The packages the lock file pins, installed under grpc_js/ (``make install-test``)."""
    lock = json.loads((PROJECT / "package-lock.json").read_text())["packages"]
    for package in PACKAGES:
        manifest = PROJECT / "node_modules" / package / "package.json"
        if not manifest.exists():
            pytest.fail(
                f"{package} is not installed in {PROJECT}/node_modules: run `make install-test` "
                f"(it runs `npm ci` there)",
                pytrace=False,
            )
        installed = json.loads(manifest.read_text())["version"]
        pinned = lock[f"node_modules/{package}"]["version"]
        if installed != pinned:
            pytest.fail(
                f"{package} {installed} is installed in {PROJECT}/node_modules but "
                f"package-lock.json pins {pinned}: run `make install-test`",
                pytrace=False,
            )


def _wait_for_port(address: str, timeout: float = 60.0) -> None:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@dataclass(repr=False)
class Run:
    """One run of the script against one transport: its results by case, and the servers
    (still serving, so a check can ask them the same question over grpcio)."""

    transport: str
    server: ServerProcess
    tls_server: ServerProcess | None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    returncode: int | None = None
    stderr: str = ""
    seconds: float = 0.0

    def __repr__(self) -> str:
        return f"Run({self.transport}, {len(self.results)} results)"

    def context(self) -> str:
        return (
            f"transport {self.transport}; interop.js exited {self.returncode} after "
            f"{self.seconds:.1f} s; its stderr ends:\n{self.stderr[-3000:]}\n"
            f"server log ends:\n{self.server.log()[-3000:]}"
        )


@pytest.fixture(scope="module")
def interop_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """interop_bytes (a UINT8 identity with any length: the large messages) and
    interop_sleepy."""
    repository = tmp_path_factory.mktemp("interop")
    write_model(
        repository,
        "interop_bytes",
        identity_config("interop_bytes", "TYPE_UINT8", 0, "-1"),
        {1: torch.jit.script(Identity())},
    )
    write_sleepy(repository, "interop_sleepy")
    return repository


@pytest.fixture(scope="module")
def descriptors(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_descriptor_set(tmp_path_factory.mktemp("descriptors") / "services.pb")


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path] | None:
    """CA, server certificate and key (for 127.0.0.1), or None without openssl."""
    if shutil.which("openssl") is None:
        return None
    directory = tmp_path_factory.mktemp("interop-certs")
    ca = make_ca(directory)
    cert, key = make_leaf(directory, "server", ca)
    return ca[0], cert, key


@pytest.fixture(scope="module", params=TRANSPORTS)
def run(
    request: pytest.FixtureRequest,
    example_repository: Path,
    interop_repository: Path,
    descriptors: Path,
    certificates: tuple[Path, Path, Path] | None,
) -> Iterator[Run]:
    """Both servers for one transport (plain, and TLS when openssl exists), and the script's
    results against them."""
    _check_node_modules()
    transport: str = request.param
    flag = ["--grpc-transport", transport]
    if transport == "aio":
        # The reference's keepalive defaults refuse a client that pings an idle connection
        # every second (too_many_pings, as grpcio and Triton do); the keepalive cases' client
        # does, so this server allows it through the reference's flags.
        flag += [
            "--grpc-keepalive-permit-without-calls=true",
            "--grpc-http2-min-recv-ping-interval-without-data=500",
            "--grpc-http2-max-ping-strikes=0",
        ]
    server = ServerProcess([example_repository, interop_repository], flag).start(wait=None)
    tls_server = None
    if certificates is not None:
        _, cert, key = certificates
        tls = ["--grpc-use-ssl", "--grpc-server-cert", str(cert), "--grpc-server-key", str(key)]
        tls_server = ServerProcess([example_repository], [*flag, *tls]).start(wait=None)
    outcome = Run(transport, server, tls_server)
    try:
        command = [str(NODE), str(SCRIPT), "--address", server.grpc_url]
        command += ["--descriptors", str(descriptors)]
        server.wait_for("ready", 120)
        _wait_for_port(server.grpc_url)
        if tls_server is not None and certificates is not None:
            tls_server.wait_for("ready", 120)
            _wait_for_port(tls_server.grpc_url)
            command += ["--tls-address", tls_server.grpc_url, "--root-cert", str(certificates[0])]
        else:
            command += ["--cases", ",".join(c for c in CASES if c not in TLS_CASES)]
        started = time.monotonic()
        try:
            finished = subprocess.run(
                command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=PROJECT
            )
            stdout, outcome.stderr, outcome.returncode = (
                finished.stdout,
                finished.stderr,
                finished.returncode,
            )
        except subprocess.TimeoutExpired as expired:
            stdout = _text(expired.stdout)
            outcome.stderr = _text(expired.stderr) + f"\n(killed after {RUN_TIMEOUT_S} s)"
        outcome.seconds = time.monotonic() - started
        for line in stdout.splitlines():
            if line.startswith("{"):
                result = json.loads(line)
                outcome.results[result["name"]] = result
        yield outcome
    finally:
        server.stop()
        if tls_server is not None:
            tls_server.stop()


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def test_the_script_runs_the_listed_cases() -> None:
    _check_node_modules()
    listed = subprocess.run(
        [str(NODE), str(SCRIPT), "--list"], capture_output=True, text=True, check=True, timeout=60
    )
    assert tuple(listed.stdout.split()) == CASES


@pytest.mark.parametrize("name", CASES)
def test_case(run: Run, name: str) -> None:
    if name in TLS_CASES and run.tls_server is None:
        pytest.skip("needs openssl to make the TLS certificates")
    result = run.results.get(name)
    assert result is not None, f"interop.js reported nothing for {name}; {run.context()}"
    details = result["details"]
    assert result["ok"], f"{name} failed on {run.transport}: {json.dumps(details)}"
    check = CHECKS.get(name)
    if check is not None:
        check(run, details)


# --- what each case reported, checked here ----------------------------------------------------


@contextlib.contextmanager
def _stub(run: Run) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(run.server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def _simple_expected(seed: int) -> dict[str, list[int]]:
    a = np.arange(16) + seed
    b = 3 * np.arange(16) - seed
    return {"OUTPUT0": (a + b).tolist(), "OUTPUT1": (a - b).tolist()}


def _check_simple(seed: int) -> Callable[[Run, dict[str, Any]], None]:
    def check(run: Run, details: dict[str, Any]) -> None:
        expected = _simple_expected(seed)
        assert details["OUTPUT0"] == expected["OUTPUT0"]
        assert details["OUTPUT1"] == expected["OUTPUT1"]
        assert details["raw_outputs"] is True

    return check


def _check_error(code: str, message: str) -> Callable[[Run, dict[str, Any]], None]:
    def check(run: Run, details: dict[str, Any]) -> None:
        assert details["error"] == {"code": code, "details": message}

    return check


def check_server_metadata(run: Run, details: dict[str, Any]) -> None:
    assert details["name"] == "ptserve"
    assert details["version"] == ptserve.__version__
    with grpcclient.InferenceServerClient(run.server.grpc_url) as client:
        assert details["extensions"] == list(client.get_server_metadata().extensions)


def check_model_metadata(run: Run, details: dict[str, Any]) -> None:
    assert details["versions"] == ["1"]
    assert details["platform"] == "pytorch_libtorch"


def check_model_config(run: Run, details: dict[str, Any]) -> None:
    assert details["platform"] == "pytorch_libtorch"
    assert details["output"] == [
        {"name": f"OUTPUT{i}", "data_type": "TYPE_INT32", "dims": [16]} for i in range(2)
    ]


def check_model_ready_unknown(run: Run, details: dict[str, Any]) -> None:
    """An unknown model or version: grpc-js gets what grpcio gets from the same server, be it
    NOT_FOUND with a message naming the model or ready=false."""
    requests = {
        "unknown_model": pb.ModelReadyRequest(name="no_such_model"),
        "unknown_version": pb.ModelReadyRequest(name="versioned", version="9"),
    }
    with _stub(run) as stub:
        for key, request in requests.items():
            try:
                expected: dict[str, Any] = {"ready": stub.ModelReady(request, timeout=10).ready}
            except grpc.RpcError as exc:
                expected = {"error": {"code": exc.code().name, "details": exc.details()}}
            assert details[key] == expected, key
    unknown = details["unknown_model"]
    assert unknown == {"ready": False} or unknown == {
        "error": {"code": "NOT_FOUND", "details": UNKNOWN_MODEL}
    }


def check_raw(run: Run, details: dict[str, Any]) -> None:
    _check_simple(7)(run, details)
    assert details["id"] == "raw-7"
    assert details["model_version"] == "1"


def check_mlp(run: Run, details: dict[str, Any]) -> None:
    """The answer the model gives here, in this process, to the same inputs."""
    inputs = ((np.arange(4 * 64) % 17 - 8) / 8).astype(np.float32).reshape(4, 64)
    with torch.no_grad():
        expected = mlp()(torch.from_numpy(inputs)).numpy()
    assert details["shape"] == [4, 10]
    got = np.array(details["OUTPUT__0"], dtype=np.float32).reshape(4, 10)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def check_versioned(run: Run, details: dict[str, Any]) -> None:
    for version in (1, 2, 3):
        assert details[str(version)] == [version * v for v in (1, 2, 3, 4.5)]


def check_string(run: Run, details: dict[str, Any]) -> None:
    a = [11 * k for k in range(16)]
    b = [100 - k for k in range(16)]
    assert details["OUTPUT0"] == [str(x + y) for x, y in zip(a, b, strict=True)]
    assert details["OUTPUT1"] == [str(x - y) for x, y in zip(a, b, strict=True)]


def _check_large(mebibytes: int) -> Callable[[Run, dict[str, Any]], None]:
    def check(run: Run, details: dict[str, Any]) -> None:
        assert details["bytes"] == mebibytes * 2**20
        assert details["id"] == f"large-{mebibytes}"

    return check


def check_stream_1000(run: Run, details: dict[str, Any]) -> None:
    """Every answer there once and correct, matched by id. Not their order: the stream's
    requests run concurrently and their answers go back as they finish (out_of_order counts
    the answers not at their request's position, for the record)."""
    assert details["replies"] == details["correct"] == 1000
    assert 0 <= details["out_of_order"] <= 1000


def check_stream_some_bad(run: Run, details: dict[str, Any]) -> None:
    assert details["replies"] == 12
    assert details["errors"] == {
        "unknown": UNKNOWN_MODEL,
        "shape": "unexpected shape for input 'INPUT0' for model 'simple'. "
        "Expected [-1,16], got [2,8]",
    }


def check_half_close(run: Run, details: dict[str, Any]) -> None:
    assert sorted(details["replies"]) == [f"h{i}" for i in range(5)]
    assert details["status"] == "OK"


def check_cancel(run: Run, details: dict[str, Any]) -> None:
    assert details["status"] == "CANCELLED"
    assert details["replies_before_cancel"] >= 5
    with grpcclient.InferenceServerClient(run.server.grpc_url) as client:
        assert client.is_server_live() and client.is_server_ready()


def check_deadline(run: Run, details: dict[str, Any]) -> None:
    assert details["error"]["code"] == "DEADLINE_EXCEEDED"
    assert details["expired_after_ms"] < 900
    assert details["next"] == [0, 10, 12, 14]


def check_concurrent(run: Run, details: dict[str, Any]) -> None:
    assert details["calls"] == 500


def check_many_channels(run: Run, details: dict[str, Any]) -> None:
    assert (details["channels"], details["calls"]) == (8, 400)


def check_metadata(run: Run, details: dict[str, Any]) -> None:
    assert "content-type" in details["header_keys"]


def check_compressed(run: Run, details: dict[str, Any]) -> None:
    assert len(details["calls"]) == 3
    assert details["stream_replies"] == 5


def check_compression_on_the_wire(run: Run, details: dict[str, Any]) -> None:
    accepted = [name.strip() for name in details["grpc_accept_encoding"].split(",")]
    assert {"gzip", "deflate"} <= set(accepted)
    # Whether the answer is compressed is the server's choice; header and flag must agree.
    encoded = details["response_encoding"] not in (None, "identity")
    assert details["response_compressed"] is encoded


def _check_keepalive(minimum_pings: int) -> Callable[[Run, dict[str, Any]], None]:
    def check(run: Run, details: dict[str, Any]) -> None:
        assert details["goaway"] == []
        assert details["excess_pings"] == []
        assert details["states"] == ["READY"]
        assert details["pings_answered"] >= minimum_pings

    return check


def check_tls(run: Run, details: dict[str, Any]) -> None:
    assert details == {"alpn": "h2", "live": True}


def check_tls_untrusted(run: Run, details: dict[str, Any]) -> None:
    assert details["error"]["code"] == "UNAVAILABLE"


def check_repository_index(run: Run, details: dict[str, Any]) -> None:
    """The same models, versions and states that grpcio's client sees."""
    with grpcclient.InferenceServerClient(run.server.grpc_url) as client:
        index = client.get_model_repository_index().models
    expected = sorted([m.name, m.version, m.state] for m in index)
    assert sorted(details["models"]) == expected
    assert sorted(details["ready"]) == expected
    assert ["versioned", "3", "READY"] in expected
    assert ["interop_bytes", "1", "READY"] in expected


def check_statistics(run: Run, details: dict[str, Any]) -> None:
    assert details["name"] == "cnn"
    assert details["version"] == "1"
    assert details["success"] == details["inference_count"] == details["execution_count"] == "3"
    assert details["fail"] == "0"
    assert int(details["success_ns"]) > 0
    assert details["unknown"] == {"code": "NOT_FOUND", "details": UNKNOWN_MODEL}


def check_health(run: Run, details: dict[str, Any]) -> None:
    assert details["(server)"] == details["inference.GRPCInferenceService"] == "SERVING"
    assert details["unknown"] == {
        "code": "NOT_FOUND",
        "details": "unknown service 'no.such.Service'",
    }


def check_health_watch(run: Run, details: dict[str, Any]) -> None:
    """Only Check is served; Watch is an unknown method."""
    assert details["code"] == "UNIMPLEMENTED"
    assert details["replies"] == []


def check_unknown_method(run: Run, details: dict[str, Any]) -> None:
    assert details["error"]["code"] == "UNIMPLEMENTED"


CHECKS: dict[str, Callable[[Run, dict[str, Any]], None]] = {
    "ServerLive": lambda run, details: _equal(details, {"live": True}),
    "ServerReady": lambda run, details: _equal(details, {"ready": True}),
    "ServerMetadata": check_server_metadata,
    "ModelMetadata": check_model_metadata,
    "ModelConfig": check_model_config,
    "ModelReady": lambda run, details: _equal(details, {"ready": True}),
    "ModelReadyUnknown": check_model_ready_unknown,
    "ModelInferRaw": check_raw,
    "ModelInferTyped": _check_simple(-5),
    "ModelInferMlpBatch": check_mlp,
    "ModelInferVersioned": check_versioned,
    "ModelInferString": check_string,
    "ModelInferUnknownModel": _check_error("NOT_FOUND", UNKNOWN_MODEL),
    "ModelInferWrongShape": _check_error(
        "INVALID_ARGUMENT",
        "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]",
    ),
    "ModelInferWrongDatatype": _check_error(
        "INVALID_ARGUMENT",
        "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
    ),
    "LargeMessage64MiB": _check_large(64),
    "LargeMessage100MiB": _check_large(100),
    "StreamInfer1000": check_stream_1000,
    "StreamSomeBad": check_stream_some_bad,
    "StreamHalfClose": check_half_close,
    "StreamCancel": check_cancel,
    "DeadlineExceeded": check_deadline,
    "ConcurrentCalls500": check_concurrent,
    "ManyChannels": check_many_channels,
    "MetadataRoundTrip": check_metadata,
    "GzipRequests": check_compressed,
    "DeflateRequests": check_compressed,
    "CompressionOnTheWire": check_compression_on_the_wire,
    "KeepaliveIdle": _check_keepalive(3),
    "KeepaliveDuringCall": _check_keepalive(2),
    "TlsServerLive": check_tls,
    "TlsUntrustedCertificate": check_tls_untrusted,
    "RepositoryIndex": check_repository_index,
    "ModelStatistics": check_statistics,
    "HealthCheck": check_health,
    "HealthWatch": check_health_watch,
    "UnknownMethod": check_unknown_method,
}


def _equal(actual: Any, expected: Any) -> None:
    assert actual == expected
