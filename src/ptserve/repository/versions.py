"""Version folders and version policies."""

from __future__ import annotations

from pathlib import Path

from ptserve.config.parse import ModelConfig


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
