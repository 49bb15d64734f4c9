"""Opening ``--model-repository`` locations and scanning them together."""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass, field
from pathlib import Path

from ptserve.common.errors import ServerError
from ptserve.repository.layout import LocalRepository, ModelSource, Repository, RepositoryOptions
from ptserve.repository.remote import RemoteRepository, is_remote, parse_location

log = logging.getLogger("ptserve.repository")

# The optional package each scheme needs, and how to install it.
CLIENTS = {"s3": ("boto3", "pip install 'ptserve[s3]'")}


def check_location(text: str) -> None:
    """Raise ValueError, saying what to fix, for a repository URL that cannot work here."""
    if not is_remote(text):
        return
    where = parse_location(text)
    package, install = CLIENTS[where.scheme]
    if importlib.util.find_spec(package) is None:
        raise ValueError(
            f"model repository '{text}': {where.scheme}:// repositories need the {package} "
            f"package: {install}"
        )


def open_repository(location: str | Path, options: RepositoryOptions) -> Repository:
    """A local folder, or a remote repository read through the cache (ValueError when the
    location is malformed or its client library is missing)."""
    text = str(location)
    if not is_remote(text):
        return LocalRepository(Path(location), options)
    check_location(text)
    where = parse_location(text)
    # boto3 is an optional extra: imported only when an s3:// repository is named.
    from ptserve.repository.s3 import S3Store

    return RemoteRepository(where, S3Store(where), options)


@dataclass(slots=True)
class RepositoryScan:
    """Model name → where it is; names found in more than one repository; repositories that
    could not be read (and so whose models are unknown this time)."""

    models: dict[str, ModelSource] = field(default_factory=dict)
    duplicates: dict[str, list[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # location → reason


def scan_repositories(repositories: list[Repository]) -> RepositoryScan:
    """Every model of every repository; a repository that cannot be read is reported in
    ``failed`` and the others are still scanned."""
    scan = RepositoryScan()
    for repository in repositories:
        try:
            found = repository.scan()
        except ServerError as exc:
            scan.failed[repository.location] = exc.message
            continue
        for name, source in found.items():
            if name in scan.models:
                scan.duplicates.setdefault(name, [scan.models[name].location]).append(
                    source.location
                )
                continue
            scan.models[name] = source
    for name in scan.duplicates:
        del scan.models[name]
    return scan
