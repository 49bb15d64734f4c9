"""Shared fixtures: the example model repository and a server process serving it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import ptserve
from ptserve.examples import build_example_repository
from tests.serverproc import ServerProcess


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to test a compiled module older than its source: Python would import the stale
    extension in place of the edited ``.py`` (``make install`` rebuilds it)."""
    package = Path(ptserve.__file__).parent
    for extension in package.rglob("*.so"):
        source = extension.with_name(extension.name.split(".", 1)[0] + ".py")
        if source.exists() and source.stat().st_mtime > extension.stat().st_mtime:
            pytest.exit(
                f"{extension} is older than {source.name}: run `make install` to rebuild the "
                "compiled modules, or `make install PURE=1` to remove them",
                returncode=2,
            )


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
