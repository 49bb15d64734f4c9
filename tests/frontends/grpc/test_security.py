"""gRPC access control: restricted protocol groups (PERMISSION_DENIED without the metadata key),
TLS and mutual TLS with certificates made in the test."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from ptserve.frontends.grpc.guard import parse_protocol_restriction
from ptserve.frontends.grpc.server import api_groups
from ptserve.frontends.restrictions import API_GROUPS
from tests.frontends.grpc.certs import make_ca, make_leaf
from tests.serverproc import ServerProcess

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
KEY = "triton-grpc-protocol-infer-key"


def test_every_rpc_has_a_group() -> None:
    """A method missing here would silently escape every restriction."""
    methods = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods_by_name
    groups = api_groups()
    assert set(groups) == set(methods)
    assert set(groups.values()) == set(API_GROUPS)


def test_restriction_specs() -> None:
    restriction = parse_protocol_restriction("inference, model-config:Infer-Key=secret")
    assert restriction.groups == {"inference", "model-config"}
    assert restriction.header == KEY
    assert restriction.value == "secret"
    with pytest.raises(ValueError, match="unknown protocol group"):
        parse_protocol_restriction("nonsense:key=value")
    with pytest.raises(ValueError, match="expected <protocol>"):
        parse_protocol_restriction("inference")


def _inputs(value: int = 1) -> list[Any]:
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(np.full((1, 16), value, np.int32))
    return inputs


@pytest.fixture(scope="module")
def restricted(example_repository: Path) -> Iterator[ServerProcess]:
    args = [
        "--grpc-restricted-protocol",
        "inference,model-config:infer-key=secret",
        "--grpc-restricted-protocol=health,logging:admin=yes",
    ]
    with ServerProcess([example_repository], args) as server:
        yield server


def test_restricted_protocols(restricted: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(restricted.grpc_url) as client:
        with pytest.raises(InferenceServerException) as info:
            client.infer("simple", _inputs())
        assert info.value.status() == "StatusCode.PERMISSION_DENIED"
        assert f"expecting header '{KEY}'" in str(info.value.message())
        with pytest.raises(InferenceServerException) as info:
            client.infer("simple", _inputs(), headers={KEY: "wrong"})
        assert info.value.status() == "StatusCode.PERMISSION_DENIED"
        # The key without the prefix is not the header the server looks for.
        with pytest.raises(InferenceServerException):
            client.infer("simple", _inputs(), headers={"infer-key": "secret"})
        result = client.infer("simple", _inputs(2), headers={KEY: "secret"})
        assert result.as_numpy("OUTPUT0").tolist() == [[4] * 16]
        with pytest.raises(InferenceServerException) as info:
            client.get_model_config("simple")
        assert info.value.status() == "StatusCode.PERMISSION_DENIED"
        assert client.get_model_config("simple", headers={KEY: "secret"}).config.name == "simple"
        # Groups that are not restricted answer as usual.
        assert client.get_model_metadata("simple").name == "simple"
        assert client.get_inference_statistics("simple").model_stats
        with pytest.raises(InferenceServerException, match="triton-grpc-protocol-admin"):
            client.is_server_live()
        assert client.is_server_live(headers={"triton-grpc-protocol-admin": "yes"})
        with pytest.raises(InferenceServerException) as info:
            client.get_log_settings()
        assert "(protocol group 'logging')" in str(info.value.message())


def test_restricted_stream_and_health(restricted: ServerProcess) -> None:
    replies: list[Any] = []
    with grpcclient.InferenceServerClient(restricted.grpc_url) as client:
        client.start_stream(callback=lambda result, error: replies.append((result, error)))
        # The server may end the stream before the request is queued; either way the
        # callback gets the refusal.
        with contextlib.suppress(InferenceServerException):
            client.async_stream_infer("simple", _inputs())
        client.stop_stream()
        assert len(replies) == 1 and replies[0][0] is None
        assert "restricted" in str(replies[0][1])
        replies.clear()
        client.start_stream(
            callback=lambda result, error: replies.append((result, error)), headers={KEY: "secret"}
        )
        client.async_stream_infer("simple", _inputs(3))
        client.stop_stream()
        assert replies[0][1] is None
        assert replies[0][0].as_numpy("OUTPUT0").tolist() == [[6] * 16]
    with grpc.insecure_channel(restricted.grpc_url) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.RpcError) as failure:
            check(b"", timeout=10)
        assert failure.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert check(b"", timeout=10, metadata=(("triton-grpc-protocol-admin", "yes"),)) == (
            b"\x08\x01"
        )


def test_duplicate_restriction_refused(example_repository: Path) -> None:
    args = ["--grpc-restricted-protocol=inference:a=1", "--grpc-restricted-protocol=inference:b=2"]
    server = ServerProcess([example_repository], args).start(wait=None)
    assert server.wait_exit(120) != 0
    assert "restricted more than once" in server.log()


def _wait_serving(url: str, **tls: Any) -> grpcclient.InferenceServerClient:
    client = grpcclient.InferenceServerClient(url, ssl=True, **tls)
    deadline = time.monotonic() + 120
    while True:
        try:
            if client.is_server_ready(client_timeout=5):
                return client
        except InferenceServerException:
            pass
        assert time.monotonic() < deadline, "the TLS server never became ready"
        time.sleep(0.2)


def _stub_call(url: str, credentials: grpc.ChannelCredentials) -> Any:
    with grpc.secure_channel(url, credentials) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        return stub.ServerLive(pb.ServerLiveRequest(), timeout=10)


@needs_openssl
def test_tls(example_repository: Path, tmp_path: Path) -> None:
    ca = make_ca(tmp_path)
    cert, key = make_leaf(tmp_path, "server", ca)
    args = ["--grpc-use-ssl", "--grpc-server-cert", str(cert), "--grpc-server-key", str(key)]
    with ServerProcess([example_repository], args) as server:
        client = _wait_serving(server.grpc_url, root_certificates=str(ca[0]))
        with client:
            result = client.infer("simple", _inputs(5))
            assert result.as_numpy("OUTPUT1").tolist() == [[0] * 16]
        # A plaintext client gets no answer, nor does one that does not trust the CA.
        with (
            grpcclient.InferenceServerClient(server.grpc_url) as plain,
            pytest.raises(InferenceServerException),
        ):
            plain.is_server_live(client_timeout=5)
        (tmp_path / "other").mkdir()
        other_ca = make_ca(tmp_path / "other")
        with pytest.raises(grpc.RpcError) as failure:
            _stub_call(server.grpc_url, grpc.ssl_channel_credentials(other_ca[0].read_bytes()))
        assert failure.value.code() == grpc.StatusCode.UNAVAILABLE


@needs_openssl
def test_mutual_tls(example_repository: Path, tmp_path: Path) -> None:
    ca = make_ca(tmp_path)
    cert, key = make_leaf(tmp_path, "server", ca)
    client_cert, client_key = make_leaf(tmp_path, "client", ca)
    args = [
        "--grpc-use-ssl-mutual",
        f"--grpc-server-cert={cert}",
        f"--grpc-server-key={key}",
        f"--grpc-root-cert={ca[0]}",
    ]
    with ServerProcess([example_repository], args) as server:
        tls = {
            "root_certificates": str(ca[0]),
            "private_key": str(client_key),
            "certificate_chain": str(client_cert),
        }
        with _wait_serving(server.grpc_url, **tls) as client:
            assert client.infer("simple", _inputs(1)).as_numpy("OUTPUT0").tolist() == [[2] * 16]
        # Without a client certificate the handshake fails.
        with pytest.raises(grpc.RpcError) as failure:
            _stub_call(server.grpc_url, grpc.ssl_channel_credentials(ca[0].read_bytes()))
        assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
        # A certificate from a CA the server does not know is refused as well.
        stranger_dir = tmp_path / "stranger"
        stranger_dir.mkdir()
        stranger = make_leaf(stranger_dir, "client", make_ca(stranger_dir))
        credentials = grpc.ssl_channel_credentials(
            ca[0].read_bytes(), stranger[1].read_bytes(), stranger[0].read_bytes()
        )
        with pytest.raises(grpc.RpcError):
            _stub_call(server.grpc_url, credentials)
