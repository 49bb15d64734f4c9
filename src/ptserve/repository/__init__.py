"""Model repositories: local folders and object stores, the layouts they may hold, version
folders and version policies."""

from ptserve.repository.layout import (
    LocalModel,
    LocalRepository,
    ModelSource,
    Repository,
    RepositoryOptions,
    fingerprint,
)
from ptserve.repository.sources import (
    RepositoryScan,
    check_location,
    open_repository,
    scan_repositories,
)
from ptserve.repository.versions import available_versions, select_versions

__all__ = [
    "LocalModel",
    "LocalRepository",
    "ModelSource",
    "Repository",
    "RepositoryOptions",
    "RepositoryScan",
    "available_versions",
    "check_location",
    "fingerprint",
    "open_repository",
    "scan_repositories",
    "select_versions",
]
