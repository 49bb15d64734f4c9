"""Errors with a status; the one table that frontends map to HTTP and gRPC codes."""

from __future__ import annotations

import enum


class Status(enum.Enum):
    """Why a call failed. Each value carries its HTTP status and gRPC status-code name."""

    INVALID_ARGUMENT = (400, "INVALID_ARGUMENT")
    NOT_FOUND = (404, "NOT_FOUND")
    ALREADY_EXISTS = (409, "ALREADY_EXISTS")
    PERMISSION_DENIED = (403, "PERMISSION_DENIED")
    UNAVAILABLE = (503, "UNAVAILABLE")
    UNSUPPORTED = (501, "UNIMPLEMENTED")
    INTERNAL = (500, "INTERNAL")

    @property
    def http_status(self) -> int:
        return self.value[0]

    @property
    def grpc_code_name(self) -> str:
        return self.value[1]


class ServerError(Exception):
    """An error that reaches the client: a status and a message that says what went wrong."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def __repr__(self) -> str:
        return f"ServerError({self.status.name}, {self.message!r})"


def invalid_arg(message: str) -> ServerError:
    return ServerError(Status.INVALID_ARGUMENT, message)


def not_found(message: str) -> ServerError:
    return ServerError(Status.NOT_FOUND, message)


def unavailable(message: str) -> ServerError:
    return ServerError(Status.UNAVAILABLE, message)


def unsupported(message: str) -> ServerError:
    return ServerError(Status.UNSUPPORTED, message)


def internal(message: str) -> ServerError:
    return ServerError(Status.INTERNAL, message)
