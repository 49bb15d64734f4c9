"""Shared fixtures: the example model repository and a server process serving it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ptserve.examples import build_example_repository
from tests.serverproc import ServerProcess


@pytest.fixture(scope="session")
def example_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("examples")
    build_example_repository(repository)
    return repository


@pytest.fixture(scope="session")
def example_server(example_repository: Path) -> Iterator[ServerProcess]:
    """One ptserve process serving the example repository for the whole session."""
    server = ServerProcess([example_repository]).start()
    yield server
    server.stop()
