"""The parameters of the repository API's load and unload requests, read alike by both
frontends: HTTP gives them as JSON values (files as base64 text), gRPC as typed parameters
(files as bytes); either way a parameter of the wrong type is refused, naming it."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from ptserve.common.errors import invalid_arg

FILE_PREFIX = "file:"


def load_parameters(
    parameters: Mapping[str, Any], files_as_base64: bool
) -> tuple[str | None, dict[str, bytes]]:
    """The ``config`` (a ModelConfig as JSON) and ``file:<path>`` contents of a load request."""
    config = parameters.get("config")
    if config is not None and not isinstance(config, str):
        raise invalid_arg(
            f"load: parameter 'config' must be a string holding JSON, got {_kind(config)}"
        )
    files: dict[str, bytes] = {}
    for key, value in parameters.items():
        if not key.startswith(FILE_PREFIX):
            continue
        path = key[len(FILE_PREFIX) :]
        if files_as_base64:
            if not isinstance(value, str):
                raise invalid_arg(
                    f"load: parameter '{key}' must be base64 text, got {_kind(value)}"
                )
            try:
                files[path] = base64.b64decode(value, validate=True)
            except binascii.Error as exc:
                raise invalid_arg(f"load: parameter '{key}' is not valid base64: {exc}") from None
        elif isinstance(value, bytes):
            files[path] = value
        else:
            raise invalid_arg(f"load: parameter '{key}' must be bytes, got {_kind(value)}")
    return config, files


def unload_dependents(parameters: Mapping[str, Any]) -> bool:
    """The ``unload_dependents`` flag of an unload request (false when absent)."""
    value = parameters.get("unload_dependents", False)
    if not isinstance(value, bool):
        raise invalid_arg(
            f"unload: parameter 'unload_dependents' must be true or false, got {_kind(value)}"
        )
    return value


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", str: "a string", bytes: "bytes"}.get(
        type(value), type(value).__name__
    )
