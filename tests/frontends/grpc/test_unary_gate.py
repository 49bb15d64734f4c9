"""The compiled gate every unary call passes through: restriction, unparsable request, and the
method's errors turned into statuses (end to end, the suites in this folder drive it through
the server with tritonclient)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import pytest

from ptserve.common.errors import invalid_arg, not_found
from ptserve.frontends.grpc.guard import parse_protocol_restriction, protocol_restrictions
from ptserve.frontends.grpc.unary_gate import UnaryGate, Unparsable


class Context:
    """What the gate uses of a servicer context: metadata and abort."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.metadata = metadata
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise grpc.aio.AbortError()


NONE = protocol_restrictions([])


def call(gate: UnaryGate, request: Any, context: Context) -> Any:
    return asyncio.run(gate(request, context))


def test_answers_what_the_method_returns() -> None:
    async def method(request: Any, context: Any) -> Any:
        return request * 2

    assert call(UnaryGate(method, "Echo", None, NONE), 21, Context()) == 42


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (not_found("unknown model 'x'"), grpc.StatusCode.NOT_FOUND),
        (invalid_arg("bad shape"), grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
def test_a_server_error_ends_the_call_with_its_code(error: Exception, code: Any) -> None:
    async def method(request: Any, context: Any) -> Any:
        raise error

    context = Context()
    with pytest.raises(grpc.aio.AbortError):
        call(UnaryGate(method, "ModelInfer", None, NONE), b"", context)
    assert context.aborted == (code, str(error))


def test_anything_else_is_internal_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def method(request: Any, context: Any) -> Any:
        raise KeyError("oops")

    context = Context()
    with caplog.at_level(logging.ERROR, "ptserve.grpc"), pytest.raises(grpc.aio.AbortError):
        call(UnaryGate(method, "ModelConfig", None, NONE), b"", context)
    assert context.aborted == (grpc.StatusCode.INTERNAL, "internal error: KeyError('oops')")
    assert "gRPC ModelConfig failed" in caplog.text


def test_an_abort_inside_the_method_passes_through() -> None:
    async def method(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "full")

    context = Context()
    with pytest.raises(grpc.aio.AbortError):
        call(UnaryGate(method, "ModelInfer", None, NONE), b"", context)
    assert context.aborted == (grpc.StatusCode.RESOURCE_EXHAUSTED, "full")


def test_unparsable_request_is_invalid_argument_before_the_method() -> None:
    ran = []

    async def method(request: Any, context: Any) -> Any:
        ran.append(request)

    context = Context()
    with pytest.raises(grpc.aio.AbortError):
        call(UnaryGate(method, "ModelConfig", None, NONE), Unparsable("not a message"), context)
    assert context.aborted == (grpc.StatusCode.INVALID_ARGUMENT, "not a message")
    assert not ran


def test_a_restricted_group_needs_its_metadata() -> None:
    async def method(request: Any, context: Any) -> Any:
        return "ok"

    restrictions = protocol_restrictions([parse_protocol_restriction("inference:key=secret")])
    gate = UnaryGate(method, "ModelInfer", "inference", restrictions)
    refused = Context()
    with pytest.raises(grpc.aio.AbortError):
        call(gate, b"", refused)
    assert refused.aborted is not None
    assert refused.aborted[0] == grpc.StatusCode.PERMISSION_DENIED
    assert call(gate, b"", Context((("triton-grpc-protocol-key", "secret"),))) == "ok"
