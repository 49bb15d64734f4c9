"""Restricted API groups, shared by ``--http-restricted-api`` and ``--grpc-restricted-protocol``.

Both flags take ``<group>[,<group>...]:<key>=<value>`` with the same group names; a request of a
restricted group passes only when it carries the header (HTTP) or metadata key (gRPC) with that
value. Each frontend maps its own routes or RPCs to a group.
"""

from __future__ import annotations

from collections.abc import Mapping
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


@dataclass(frozen=True, slots=True)
class Restriction:
    """Requests to ``groups`` need header ``header`` (lower case) equal to ``value``."""

    groups: frozenset[str]
    header: str
    value: str


def parse_restriction(spec: str, kind: str = "API", header_prefix: str = "") -> Restriction:
    """``<group>[,<group>...]:<key>=<value>``; the header is ``header_prefix + key`` (gRPC
    prefixes the key, as the reference does)."""
    groups_text, sep, setting = spec.partition(":")
    key, eq, value = setting.partition("=")
    if not sep or not eq or not key.strip():
        word = kind.lower()
        name = "key" if header_prefix else "header"
        raise ValueError(f"expected <{word}>[,<{word}>...]:<{name}>=<value>, got '{spec}'")
    groups = frozenset(g.strip() for g in groups_text.split(",") if g.strip())
    unknown = sorted(groups - set(API_GROUPS))
    if not groups or unknown:
        raise ValueError(
            f"unknown {kind} group(s) {unknown or '(none given)'} in '{spec}'; "
            f"groups are {', '.join(API_GROUPS)}"
        )
    return Restriction(groups, header_prefix + key.strip().lower(), value)


class Restrictions:
    """All configured restrictions of one frontend; each group may be restricted once."""

    def __init__(self, restrictions: list[Restriction], kind: str = "API") -> None:
        self.kind = kind
        self.by_group: dict[str, Restriction] = {}
        for restriction in restrictions:
            for group in restriction.groups:
                if group in self.by_group:
                    raise ValueError(f"{kind} group '{group}' is restricted more than once")
                self.by_group[group] = restriction

    def __bool__(self) -> bool:
        return bool(self.by_group)

    def check(self, group: str | None, headers: Mapping[str, str]) -> str | None:
        """Why a request of ``group`` is refused, or None when it may pass."""
        restriction = self.by_group.get(group) if group else None
        if restriction is None or headers.get(restriction.header) == restriction.value:
            return None
        return (
            f"This {self.kind} is restricted, expecting header '{restriction.header}' "
            f"({self.kind} group '{group}')"
        )
