"""Fixtures for the gRPC frontend: clients of the example server, and a second server with a
repository of one identity model per datatype and client shared memory allowed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import torch
import tritonclient.grpc as grpcclient
from torch import nn
from tritonclient.grpc import service_pb2_grpc

from ptserve.examples import write_model
from tests.serverproc import ServerProcess

# Datatypes the identity models cover (BYTES is covered by the example simple_string model).
DTYPES = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BF16",
)


class Identity(nn.Module):
    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        return INPUT0


def identity_name(dtype: str) -> str:
    return f"id_{dtype.lower()}"


def _identity_config(dtype: str) -> str:
    config_type = "TYPE_STRING" if dtype == "BYTES" else f"TYPE_{dtype}"
    return f"""
        name: "{identity_name(dtype)}"
        platform: "pytorch_libtorch"
        max_batch_size: 4
        input [ {{ name: "INPUT0" data_type: {config_type} dims: [ -1 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: {config_type} dims: [ -1 ] }} ]
    """


@pytest.fixture(scope="session")
def dtype_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("grpc-dtypes")
    module = torch.jit.script(Identity())
    for dtype in DTYPES:
        write_model(repository, identity_name(dtype), _identity_config(dtype), {1: module})
    return repository


@pytest.fixture(scope="session")
def shm_server(dtype_repository: Path) -> Iterator[ServerProcess]:
    """The identity models, with --allow-client-shm=true."""
    server = ServerProcess([dtype_repository], ["--allow-client-shm=true"]).start()
    yield server
    server.stop()


@pytest.fixture()
def client(example_server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(example_server.grpc_url) as connection:
        yield connection


@pytest.fixture()
def shm_client(shm_server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(shm_server.grpc_url) as connection:
        yield connection


@pytest.fixture()
def stub(example_server: ServerProcess) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    """The raw generated stub, to send what tritonclient never sends (typed contents, ...)."""
    with grpc.insecure_channel(example_server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


@pytest.fixture()
def shm_stub(shm_server: ServerProcess) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(shm_server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
