"""The ``inference.GRPCInferenceService`` frontend (native HTTP/2 or ``grpc.aio``), sharing the
core with HTTP."""

from __future__ import annotations

from ptserve.frontends.grpc.guard import parse_protocol_restriction, protocol_restrictions
from ptserve.frontends.grpc.keepalive import Keepalive
from ptserve.frontends.grpc.server import (
    MAX_MESSAGE_BYTES,
    TRANSPORTS,
    TlsFiles,
    start_grpc_server,
)
from ptserve.frontends.grpc.servicer import InferenceServicer

__all__ = [
    "MAX_MESSAGE_BYTES",
    "TRANSPORTS",
    "InferenceServicer",
    "Keepalive",
    "TlsFiles",
    "parse_protocol_restriction",
    "protocol_restrictions",
    "start_grpc_server",
]
