"""The exception ``Context.abort`` raises, apart from the compiled call module: it derives from
grpc.aio's own (so the servicer's error wrappers let it through as they do grpc.aio's), and a
compiled class cannot derive from an interpreted one."""

from __future__ import annotations

import grpc


class Aborted(grpc.aio.AbortError):  # type: ignore[misc]
    """Raised by ``Context.abort`` once the call's status is set."""
