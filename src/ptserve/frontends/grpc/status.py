"""ServerError → gRPC status, from the core's single error table; the API group of each RPC
(what ``--grpc-restricted-protocol`` names), declared where the RPC is."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from ptserve.common.errors import ServerError, Status

log = logging.getLogger("ptserve.grpc")

Reply = TypeVar("Reply")


def grpc_code(status: Status) -> grpc.StatusCode:
    """The gRPC code the error table names for ``status``."""
    return grpc.StatusCode[status.grpc_code_name]


GROUP_ATTRIBUTE = "api_group"
Method = TypeVar("Method", bound=Callable[..., Any])


def api_group(group: str) -> Callable[[Method], Method]:
    """Declare the API group of a servicer method (for a streaming RPC; ``rpc`` does it for the
    unary ones)."""

    def mark(method: Method) -> Method:
        setattr(method, GROUP_ATTRIBUTE, group)
        return method

    return mark


def group_of(method: Any) -> str | None:
    """The API group a servicer method declares, or None."""
    group = getattr(method, GROUP_ATTRIBUTE, None)
    return group if isinstance(group, str) else None


def rpc(
    group: str,
) -> Callable[
    [Callable[[Any, Any, Any], Awaitable[Reply]]], Callable[[Any, Any, Any], Awaitable[Reply]]
]:
    """A unary RPC of API group ``group``: a ServerError ends the call with its code and
    message, and anything unexpected with INTERNAL (logged, since it is a bug of ours)."""

    def wrap(
        method: Callable[[Any, Any, Any], Awaitable[Reply]],
    ) -> Callable[[Any, Any, Any], Awaitable[Reply]]:
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

        return api_group(group)(wrapper)

    return wrap
