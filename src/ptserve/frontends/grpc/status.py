"""ServerError → gRPC status, from the core's single error table; the API group of each RPC
(what ``--grpc-restricted-protocol`` names), declared where the RPC is. The guard applies the
restriction to every call and the status to every unary call's error (``unary_gate``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from ptserve.common.errors import Status


def grpc_code(status: Status) -> grpc.StatusCode:
    """The gRPC code the error table names for ``status``."""
    return grpc.StatusCode[status.grpc_code_name]


GROUP_ATTRIBUTE = "api_group"
Method = TypeVar("Method", bound=Callable[..., Any])


def api_group(group: str) -> Callable[[Method], Method]:
    """Declare the API group of a servicer method."""

    def mark(method: Method) -> Method:
        setattr(method, GROUP_ATTRIBUTE, group)
        return method

    return mark


def group_of(method: Any) -> str | None:
    """The API group a servicer method declares, or None."""
    group = getattr(method, GROUP_ATTRIBUTE, None)
    return group if isinstance(group, str) else None
