"""``--http-restricted-api``: which API group each route belongs to; the groups, the flag's
parsing and the check itself are shared with gRPC in ``ptserve.frontends.restrictions``."""

from __future__ import annotations

import re

from ptserve.frontends import restrictions as shared
from ptserve.frontends.restrictions import API_GROUPS, Restriction

__all__ = ["API_GROUPS", "Restriction", "Restrictions", "group_of", "parse_restriction"]

_MODEL = r"/v2/models/[^/]+(?:/versions/[^/]+)?"
_GROUP_OF = (
    (re.compile(r"/v2/health/.*"), "health"),
    (re.compile(r"/v2/repository(?:/.*)?"), "model-repository"),
    (re.compile(r"/v2/(?:system|cuda)sharedmemory(?:/.*)?"), "shared-memory"),
    (re.compile(r"/v2/logging"), "logging"),
    (re.compile(r"/v2/trace/setting|" + _MODEL + r"/trace/setting"), "trace"),
    (re.compile(r"/v2/models/stats|" + _MODEL + r"/stats"), "statistics"),
    (re.compile(_MODEL + r"/config"), "model-config"),
    (re.compile(_MODEL + r"/ready"), "health"),
    (re.compile(_MODEL + r"/(?:infer|generate(?:_stream)?)"), "inference"),
    (re.compile(r"/v2|" + _MODEL), "metadata"),
)


def group_of(path: str) -> str | None:
    """The API group of a request path, or None for paths outside every group."""
    for pattern, group in _GROUP_OF:
        if pattern.fullmatch(path):
            return group
    return None


def parse_restriction(spec: str) -> Restriction:
    """``<api>[,<api>...]:<header>=<value>``, as the reference's flag takes it."""
    return shared.parse_restriction(spec)


class Restrictions(shared.Restrictions):
    """The HTTP restrictions, checked by request path."""

    def denial(self, path: str, headers: dict[str, str]) -> str | None:
        """Why the request is refused, or None when it may pass."""
        if not self.by_group:
            return None
        return self.check(group_of(path), headers)
