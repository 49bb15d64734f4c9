"""The standard ``grpc.health.v1.Health/Check``, by hand: two one-field messages do not justify
a dependency on grpcio-health-checking.

HealthCheckRequest is ``string service = 1``; HealthCheckResponse is ``ServingStatus status = 1``
(SERVING = 1, NOT_SERVING = 2). Only Check is offered; Watch answers UNIMPLEMENTED like any
unknown method.
"""

from __future__ import annotations

from typing import Any

import grpc

from ptserve.core.server import InferenceServer

SERVICE = "grpc.health.v1.Health"
REQUEST_TYPE = "grpc.health.v1.HealthCheckRequest"
SERVING = 1
NOT_SERVING = 2
KNOWN_SERVICES = ("", "inference.GRPCInferenceService")


def decode_service(data: bytes) -> str:
    """The ``service`` field of a HealthCheckRequest (other fields are skipped)."""
    service = ""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, position = _varint(data, position)
        elif wire == 2:
            length, position = _varint(data, position)
            if position + length > len(data):
                raise ValueError("truncated message")
            if field == 1:
                service = data[position : position + length].decode("utf-8", "replace")
            position += length
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
            if position > len(data):
                raise ValueError("truncated message")
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return service


def encode_status(status: int) -> bytes:
    return bytes([0x08, status])


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data):
            raise ValueError("truncated varint")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def health_handlers(server: InferenceServer) -> dict[str, Any]:
    """The service's method handlers: Check answers from the core's readiness."""

    async def check(service: str, context: Any) -> int:
        if service not in KNOWN_SERVICES:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service '{service}'")
        return SERVING if server.ready else NOT_SERVING

    handler = grpc.unary_unary_rpc_method_handler(
        check, request_deserializer=decode_service, response_serializer=encode_status
    )
    return {"Check": handler}
