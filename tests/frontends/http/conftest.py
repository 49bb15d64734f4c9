"""A server with the example models plus an identity model for every datatype."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.models import write_identity_models
from tests.serverproc import ServerProcess


@pytest.fixture(scope="package")
def http_repository(example_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("http-repo")
    for child in example_repository.iterdir():
        shutil.copytree(child, repository / child.name)
    write_identity_models(repository)
    return repository


@pytest.fixture(scope="package")
def http_server(http_repository: Path) -> Iterator[ServerProcess]:
    server = ServerProcess([http_repository], ["--http-max-input-size", str(1 << 20)]).start()
    yield server
    server.stop()
