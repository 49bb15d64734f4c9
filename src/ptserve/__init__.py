"""ptserve: a PyTorch inference server that speaks Triton's protocols.

``ptserve.Server`` (and ``AsyncServer``, ``Model``, ``AsyncModel``) is the in-process API of
``ptserve.embedded``. It is imported on first use, so that importing any part of the package
(``ptserve.common.errors``, a transport) does not pay for torch and every frontend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ptserve.common.errors import ServerError, Status
from ptserve.common.version import __version__

if TYPE_CHECKING:
    from ptserve.embedded.api import AsyncModel, AsyncServer, Model, Server

# What every call of the in-process API raises: the wire APIs' error, with its ``status``.
InferenceError = ServerError

_EMBEDDED = ("AsyncModel", "AsyncServer", "Model", "Server")

__all__ = [
    "AsyncModel",
    "AsyncServer",
    "InferenceError",
    "Model",
    "Server",
    "ServerError",
    "Status",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in _EMBEDDED:
        from ptserve.embedded import api

        return getattr(api, name)
    raise AttributeError(f"module 'ptserve' has no attribute '{name}'")
