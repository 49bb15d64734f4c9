"""One gate in front of every RPC, health included: protocol restrictions
(``--grpc-restricted-protocol``), request messages that do not parse, and errors out of a unary
method turned into its status (``unary_gate``, compiled: every unary call passes through it).

grpc would answer an unparsable message with UNKNOWN; wrapping each method's deserializer turns
it into INVALID_ARGUMENT naming the message type, before any servicer code runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import grpc

from ptserve.frontends.grpc.unary_gate import UnaryGate, Unparsable, refusal
from ptserve.frontends.restrictions import Restriction, Restrictions, parse_restriction

KIND = "protocol"
HEADER_PREFIX = "triton-grpc-protocol-"


def parse_protocol_restriction(spec: str) -> Restriction:
    """``<protocol>[,<protocol>...]:<key>=<value>``; clients send ``triton-grpc-protocol-<key>``."""
    return parse_restriction(spec, KIND, HEADER_PREFIX)


def protocol_restrictions(restrictions: list[Restriction]) -> Restrictions:
    """Raises ValueError when a protocol group is restricted twice."""
    return Restrictions(restrictions, KIND)


class _Refused(Exception):
    """An unparsable message inside a stream: ends the stream with INVALID_ARGUMENT."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _lenient(
    deserializer: Callable[[bytes], Any] | None, what: str
) -> Callable[[bytes], Any] | None:
    """The deserializer, answering an unparsable message with ``Unparsable``; None (the method
    takes the message's bytes, see ``WIRE_METHODS``) stays None."""
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # protobuf's DecodeError, or a hand-written decoder's error
            return Unparsable(f"the request is not a valid {what} message: {exc}")

    return parse


def guard_handler(
    handler: Any, name: str, what: str, group: str | None, restrictions: Restrictions
) -> grpc.RpcMethodHandler:
    """Method ``name``'s ``handler`` with a lenient deserializer, the checks run before its
    behaviour and, for a unary method, its errors turned into statuses."""
    deserialize = _lenient(handler.request_deserializer, what)
    serialize = handler.response_serializer
    restricted = group if group is not None and group in restrictions.by_group else None
    if handler.unary_unary is not None:
        unary = UnaryGate(handler.unary_unary, name, restricted, restrictions)
        return grpc.unary_unary_rpc_method_handler(unary, deserialize, serialize)
    if handler.stream_stream is not None:
        stream_behaviour = handler.stream_stream

        async def checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, Unparsable):
                    raise _Refused(request.message)
                yield request

        async def stream(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            if restricted is not None:
                await refusal(context, restricted, restrictions)
            try:
                async for reply in stream_behaviour(checked(requests), context):
                    yield reply
            except _Refused as refused:
                # Aborted here, by the coroutine that writes the replies, never while a reply
                # is being written: aborting from the servicer's reading side can race a write
                # and leave the stream without its status.
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused.message)

        return grpc.stream_stream_rpc_method_handler(stream, deserialize, serialize)
    raise TypeError(f"no guard for the kind of method {what}")  # the service has no others


def guard_service(
    handlers: Mapping[str, Any],
    request_types: Mapping[str, str],
    groups: Mapping[str, str],
    restrictions: Restrictions,
) -> dict[str, grpc.RpcMethodHandler]:
    """Every method handler of a service, guarded."""
    return {
        name: guard_handler(
            handler, name, request_types.get(name, name), groups.get(name), restrictions
        )
        for name, handler in handlers.items()
    }
