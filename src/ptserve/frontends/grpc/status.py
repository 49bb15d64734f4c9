"""ServerError → gRPC status, from the core's single error table."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from ptserve.core.errors import ServerError, Status

log = logging.getLogger("ptserve.grpc")

Reply = TypeVar("Reply")


def grpc_code(status: Status) -> grpc.StatusCode:
    """The gRPC code the error table names for ``status``."""
    return grpc.StatusCode[status.grpc_code_name]


def rpc(
    method: Callable[[Any, Any, Any], Awaitable[Reply]],
) -> Callable[[Any, Any, Any], Awaitable[Reply]]:
    """Wrap a unary RPC so a ServerError ends the call with its code and message, and anything
    unexpected with INTERNAL (logged, since it is a bug of ours)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: Any) -> Reply:
        try:
            return await method(self, request, context)
        except ServerError as exc:
            await context.abort(grpc_code(exc.status), exc.message)
        except Exception as exc:
            if isinstance(exc, grpc.aio.AbortError):
                raise
            log.exception("gRPC %s failed", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {exc!r}")
        raise AssertionError("context.abort returned")  # pragma: no cover

    return wrapper
