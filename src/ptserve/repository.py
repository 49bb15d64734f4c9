"""Model repositories on disk: which models they hold and which versions a policy selects."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from ptserve.config.parse import ModelConfig

log = logging.getLogger("ptserve.repository")


@dataclass(slots=True)
class RepositoryScan:
    """Model name → model folder, and names found in more than one repository."""

    models: dict[str, Path] = field(default_factory=dict)
    duplicates: dict[str, list[Path]] = field(default_factory=dict)


def scan_repositories(repositories: list[Path]) -> RepositoryScan:
    """Every model folder (a directory, not hidden) of every repository."""
    scan = RepositoryScan()
    for repository in repositories:
        if not repository.is_dir():
            log.error("model repository '%s' is not a directory", repository)
            continue
        for child in sorted(repository.iterdir()):
            if not child.is_dir() or child.name.startswith("."):
                continue
            if child.name in scan.models:
                scan.duplicates.setdefault(child.name, [scan.models[child.name]]).append(child)
                continue
            scan.models[child.name] = child
    for name in scan.duplicates:
        del scan.models[name]
    return scan


def available_versions(model_dir: Path) -> list[int]:
    """The integer-named version folders of a model, ascending."""
    versions = []
    for child in model_dir.iterdir():
        if child.is_dir() and child.name.isdigit():
            versions.append(int(child.name))
    return sorted(versions)


def select_versions(config: ModelConfig, available: list[int]) -> list[int]:
    """The versions the config's version policy asks for, among those on disk."""
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return list(available)
    if choice == "specific":
        wanted = set(policy.specific.versions)
        return [v for v in available if v in wanted]
    count = policy.latest.num_versions if choice == "latest" else 1
    return available[-max(count, 1) :] if available else []
