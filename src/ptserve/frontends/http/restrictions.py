"""``--http-restricted-api``: API groups that answer 403 unless a header carries a set value."""

from __future__ import annotations

import re
from dataclasses import dataclass

API_GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)

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


@dataclass(frozen=True, slots=True)
class Restriction:
    """Requests to ``groups`` need header ``header`` (lower case) equal to ``value``."""

    groups: frozenset[str]
    header: str
    value: str


def parse_restriction(spec: str) -> Restriction:
    """``<group>[,<group>...]:<header>=<value>``, as the reference's flag takes it."""
    groups_text, sep, setting = spec.partition(":")
    header, eq, value = setting.partition("=")
    if not sep or not eq or not header.strip():
        raise ValueError(f"expected <api>[,<api>...]:<header>=<value>, got '{spec}'")
    groups = frozenset(g.strip() for g in groups_text.split(",") if g.strip())
    unknown = sorted(groups - set(API_GROUPS))
    if not groups or unknown:
        raise ValueError(
            f"unknown API group(s) {unknown or '(none given)'} in '{spec}'; "
            f"groups are {', '.join(API_GROUPS)}"
        )
    return Restriction(groups, header.strip().lower(), value)


class Restrictions:
    """All configured restrictions; each group may be restricted once."""

    def __init__(self, restrictions: list[Restriction]) -> None:
        self.by_group: dict[str, Restriction] = {}
        for restriction in restrictions:
            for group in restriction.groups:
                if group in self.by_group:
                    raise ValueError(f"API group '{group}' is restricted more than once")
                self.by_group[group] = restriction

    def denial(self, path: str, headers: dict[str, str]) -> str | None:
        """Why the request is refused, or None when it may pass."""
        if not self.by_group:
            return None
        group = group_of(path)
        restriction = self.by_group.get(group) if group else None
        if restriction is None:
            return None
        if headers.get(restriction.header) == restriction.value:
            return None
        return (
            f"This API is restricted, expecting header '{restriction.header}' (API group '{group}')"
        )
