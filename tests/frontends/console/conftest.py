"""Servers for the console's tests (see servers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.frontends.console.servers import (
    LOADED,
    METRICS,
    build_repository,
    explicit,
    start_restricted,
)
from tests.serverproc import ServerProcess


@pytest.fixture(scope="package")
def console_repository(example_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(example_repository, tmp_path_factory.mktemp("console-repo"))


@pytest.fixture(scope="package")
def console_server(console_repository: Path) -> Iterator[ServerProcess]:
    """Unrestricted, explicit mode, latency summaries and histogram on; `broken` not loaded."""
    server = ServerProcess([console_repository], [*explicit(LOADED), *METRICS]).start()
    yield server
    server.stop()


@pytest.fixture(scope="package")
def restricted_server(console_repository: Path) -> Iterator[ServerProcess]:
    server = start_restricted(console_repository)
    yield server
    server.stop()


@pytest.fixture(scope="package")
def console_off_server(console_repository: Path) -> Iterator[ServerProcess]:
    """The console and the metrics off."""
    args = ["--allow-console", "false", "--allow-metrics", "false", *explicit(["simple"])]
    server = ServerProcess([console_repository], args).start()
    yield server
    server.stop()
