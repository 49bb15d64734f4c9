"""The guard's half that every unary call passes through (``guard.guard_handler`` builds it):
the protocol restriction, an unparsable request, and the method's errors turned into statuses.

Compiled (pyproject's native-modules), apart from the streaming half (mypyc builds no async
generators): an interpreted layer here would cost the request path a Python frame each time
the call resumes. A ServerError ends the call with the code the core's error table names,
anything else with INTERNAL (logged: it is a bug of ours).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from ptserve.common.errors import ServerError
from ptserve.frontends.grpc.status import grpc_code
from ptserve.frontends.restrictions import Restrictions

log = logging.getLogger("ptserve.grpc")


class Unparsable:
    """Stands in for a request message that failed to parse, so the guard can refuse it."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


async def refusal(context: Any, group: str, restrictions: Restrictions) -> None:
    """Abort the call when the metadata lacks the value the restricted protocol asks for."""
    metadata = {key: value for key, value in context.invocation_metadata() or ()}
    denial = restrictions.check(group, metadata)
    if denial is not None:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, denial)


class UnaryGate:
    """Method ``name``'s behaviour behind the checks; called as the method itself."""

    def __init__(
        self,
        behaviour: Callable[[Any, Any], Awaitable[Any]],
        name: str,
        restricted: str | None,
        restrictions: Restrictions,
    ) -> None:
        self.behaviour = behaviour
        self.name = name
        self.restricted = restricted  # the method's group, when a restriction names it
        self.restrictions = restrictions

    async def __call__(self, request: Any, context: Any) -> Any:
        if self.restricted is not None:
            await refusal(context, self.restricted, self.restrictions)
        if isinstance(request, Unparsable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        try:
            return await self.behaviour(request, context)
        except ServerError as error:
            await context.abort(grpc_code(error.status), error.message)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            log.exception("gRPC %s failed", self.name)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {exc!r}")
        raise AssertionError("context.abort returned")  # pragma: no cover
