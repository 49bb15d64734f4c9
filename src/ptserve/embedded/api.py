"""What ``import ptserve`` offers of the in-process API, gathered in one module so that the
package's lazy attribute look-up imports it in one place."""

from __future__ import annotations

from ptserve.embedded.aio import AsyncModel, AsyncServer
from ptserve.embedded.sync import Model, Server

__all__ = ["AsyncModel", "AsyncServer", "Model", "Server"]
