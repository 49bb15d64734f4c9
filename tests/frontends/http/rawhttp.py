"""Plain HTTP calls for what tritonclient will not send: malformed bodies, odd headers."""

from __future__ import annotations

import http.client
import json
from typing import Any


def request(
    url: str,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    host, port = url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        reply = connection.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
    finally:
        connection.close()


def error_of(body: bytes) -> str:
    decoded: Any = json.loads(body)
    assert set(decoded) == {"error"}, decoded
    return str(decoded["error"])
