"""The service definitions an independent gRPC client needs, as a serialized
``google.protobuf.FileDescriptorSet``: tritonclient's compiled ``grpc_service.proto`` and
``model_config.proto`` (with any dependency they have, dependencies first), and the standard
``grpc/health/v1/health.proto`` built here field by field (its package, grpcio-health-checking,
is not a dependency).

``python -m tests.interop.descriptors FILE`` writes the set to FILE.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor
from tritonclient.grpc import model_config_pb2, service_pb2

HEALTH_FILE = "grpc/health/v1/health.proto"
_FIELD = descriptor_pb2.FieldDescriptorProto


def health_file() -> descriptor_pb2.FileDescriptorProto:
    """``grpc.health.v1``: HealthCheckRequest {string service = 1}, HealthCheckResponse
    {ServingStatus status = 1}, and Health {Check (unary), Watch (server streaming)}."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=HEALTH_FILE, package="grpc.health.v1", syntax="proto3"
    )
    request = proto.message_type.add(name="HealthCheckRequest")
    request.field.add(
        name="service", number=1, label=_FIELD.LABEL_OPTIONAL, type=_FIELD.TYPE_STRING
    )
    response = proto.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        status.value.add(name=name, number=number)
    response.field.add(
        name="status",
        number=1,
        label=_FIELD.LABEL_OPTIONAL,
        type=_FIELD.TYPE_ENUM,
        type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
    )
    service = proto.service.add(name="Health")
    service.method.add(
        name="Check",
        input_type=".grpc.health.v1.HealthCheckRequest",
        output_type=".grpc.health.v1.HealthCheckResponse",
    )
    service.method.add(
        name="Watch",
        input_type=".grpc.health.v1.HealthCheckRequest",
        output_type=".grpc.health.v1.HealthCheckResponse",
        server_streaming=True,
    )
    return proto


def _with_dependencies(files: list[FileDescriptor]) -> list[FileDescriptor]:
    """``files`` and everything they import, each after its dependencies, once."""
    ordered: list[FileDescriptor] = []
    seen: set[str] = set()

    def visit(file: FileDescriptor) -> None:
        if file.name in seen:
            return
        seen.add(file.name)
        for dependency in file.dependencies:
            visit(dependency)
        ordered.append(file)

    for file in files:
        visit(file)
    return ordered


def descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    files = descriptor_pb2.FileDescriptorSet()
    for file in _with_dependencies([model_config_pb2.DESCRIPTOR, service_pb2.DESCRIPTOR]):
        file.CopyToProto(files.file.add())
    files.file.append(health_file())
    return files


def write_descriptor_set(path: Path) -> Path:
    path.write_bytes(descriptor_set().SerializeToString())
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    args = parser.parse_args(argv)
    write_descriptor_set(args.path)


if __name__ == "__main__":
    main()
