"""gRPC over HTTP/2 on the event loop (the protocol kept by the sans-IO ``h2`` package): the
calls run where the rest of the server runs, with no second thread contending for the
interpreter."""

from ptserve.frontends.grpc.native.server import NativeGrpcServer

__all__ = ["NativeGrpcServer"]
