"""Model control modes: which models load at start, polling the repositories, explicit loads.

``none`` loads everything once; ``poll`` also rescans the repositories and loads, reloads or
unloads what changed; ``explicit`` loads only ``--load-model`` at start and then what the
repository API asks for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from google.protobuf import json_format

from ptserve.common.errors import ServerError, invalid_arg, not_found, unavailable
from ptserve.config.parse import ModelConfig
from ptserve.core.manager import ModelManager
from ptserve.repository import (
    ModelSource,
    Repository,
    RepositoryOptions,
    open_repository,
    scan_repositories,
)

log = logging.getLogger("ptserve.control")

CONTROL_MODES = ("none", "poll", "explicit")
NOT_ALLOWED = "explicit model load / unload is not allowed if polling is enabled"


def parse_config_override(name: str, text: str) -> ModelConfig:
    """A ModelConfig given as JSON in a load request."""
    config = ModelConfig()
    try:
        json_format.Parse(text, config)
    except json_format.ParseError as exc:
        raise invalid_arg(
            f"failed to load '{name}': the 'config' parameter is not a valid "
            f"model configuration in JSON: {exc}"
        ) from None
    return config


def write_files(name: str, files: dict[str, bytes]) -> Path:
    """Write a load request's files into a new folder; no path may leave that folder."""
    root = Path(tempfile.mkdtemp(prefix=f"ptserve-{name}-"))
    try:
        for relative, content in files.items():
            pure = PurePosixPath(relative)
            if not relative or pure.is_absolute() or ".." in pure.parts or "\\" in relative:
                raise invalid_arg(
                    f"failed to load '{name}': file path '{relative}' must be relative to the "
                    "model folder and must not contain '..'"
                )
            target = (root / pure).resolve()
            if not target.is_relative_to(root.resolve()) or target == root.resolve():
                raise invalid_arg(
                    f"failed to load '{name}': file path '{relative}' leaves the model folder"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root


class ModelControl:
    """Decides what loads when; the loading itself is the manager's."""

    def __init__(
        self,
        manager: ModelManager,
        repositories: Sequence[str | Path | Repository],
        mode: str = "none",
        load_models: Iterable[str] = (),
        poll_secs: float = 15.0,
        load_threads: int = 4,
        repository_options: RepositoryOptions | None = None,
    ) -> None:
        """``repositories``: local paths, object store URLs (``s3://bucket/path``) or opened
        repositories; a malformed URL or a missing client library raises ValueError."""
        if mode not in CONTROL_MODES:
            raise ValueError(f"unknown model control mode '{mode}'")
        self.manager = manager
        options = repository_options or RepositoryOptions()
        self.repositories: list[Repository] = [
            open_repository(r, options) if isinstance(r, str | Path) else r for r in repositories
        ]
        self.mode = mode
        self.load_models = list(load_models)
        self.poll_secs = poll_secs
        self.load_threads = load_threads
        self._attempted: dict[str, Hashable] = {}  # what the last load of a model saw
        self._seen: dict[str, Hashable] = {}  # what the last poll saw
        self._origin: dict[str, str] = {}  # the repository a model was loaded from
        self._poller: asyncio.Task[None] | None = None

    # --- startup -----------------------------------------------------------------------------

    async def start(self) -> list[str]:
        """Load what the mode loads at start (logging progress); returns the failures."""
        scan = scan_repositories(self.repositories)
        failures: list[str] = []
        for reason in scan.failed.values():
            log.error("%s", reason)
            failures.append(reason)
        for name, paths in scan.duplicates.items():
            message = (
                f"model '{name}' appears in several repositories "
                f"({', '.join(str(p) for p in paths)}); it is not loaded"
            )
            log.error(message)
            failures.append(message)
        if self.mode == "explicit":
            wanted = list(scan.models) if "*" in self.load_models else self.load_models
            for name in wanted:
                if name not in scan.models and name not in scan.duplicates:
                    message = (
                        f"failed to load '{name}': no model folder '{name}' in the model "
                        "repositories"
                    )
                    log.error(message)
                    failures.append(message)
            targets = {n: scan.models[n] for n in wanted if n in scan.models}
        else:
            targets = dict(scan.models)
        failures += await self._load_many(targets)
        if self.mode == "poll":
            self._poller = asyncio.get_running_loop().create_task(self._poll_forever())
        return failures

    async def _load_many(self, targets: dict[str, ModelSource]) -> list[str]:
        total = len(targets)
        if total:
            log.info("loading %d model(s): %s", total, ", ".join(targets))
        done = 0
        failures: list[str] = []

        def load(name: str, source: ModelSource) -> None:
            nonlocal done
            self._attempted[name] = self._seen[name] = source.fingerprint
            try:
                self._load_source(source)
            finally:
                done += 1
                log.info("model load progress: %d of %d done ('%s')", done, total, name)

        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max(self.load_threads, 1), "model-load") as pool:
            jobs = [loop.run_in_executor(pool, load, n, p) for n, p in targets.items()]
            for outcome in await asyncio.gather(*jobs, return_exceptions=True):
                if isinstance(outcome, ServerError):
                    failures.append(outcome.message)
                elif isinstance(outcome, BaseException):
                    log.error("model load failed: %r", outcome)
                    failures.append(str(outcome))
        return failures

    def _load_source(self, source: ModelSource, override: ModelConfig | None = None) -> None:
        """Bring the model's files to local disk (a download for remote repositories), then
        load it; its temporary folder, if any, goes when the model retires."""
        self._origin[source.name] = source.repository.location
        try:
            local = source.fetch()
        except (ServerError, OSError) as exc:
            # The files did not arrive (the store or the disk failed): poll mode tries again on
            # its next scan instead of waiting for the files to change.
            self._attempted.pop(source.name, None)
            if isinstance(exc, ServerError):
                raise
            raise unavailable(f"failed to load '{source.name}': {exc}") from None
        self.manager.load(source.name, local.path, override, temp_dir=local.temp_dir)

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None

    # --- poll mode ---------------------------------------------------------------------------

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll_secs)
            try:
                await asyncio.to_thread(self.poll_once)
            except Exception:
                log.exception("polling the model repositories failed")

    def poll_once(self) -> None:
        """Load new or changed models once their folders stopped changing; unload removed ones.

        A folder is acted on only when two polls in a row saw it the same, so a version being
        copied or a config being written is never loaded half-done.
        """
        scan = scan_repositories(self.repositories)
        for reason in scan.failed.values():
            log.warning("%s; its models stay as they are until it can be read again", reason)
        for name in list(self._attempted):
            if name not in scan.models:
                if self._origin.get(name) in scan.failed:
                    continue  # unknown this time, not gone
                self._attempted.pop(name)
                self._seen.pop(name, None)
                if name in self.manager.models:
                    log.info("model '%s' left the repository: unloading it", name)
                    self.manager.unload(name, forget=True)
        for name, source in scan.models.items():
            current = source.fingerprint
            previous = self._seen.get(name)
            self._seen[name] = current
            if self._attempted.get(name) == current:
                continue
            if previous != current:
                log.info(
                    "model '%s' changed on disk and may still be being written; it is loaded "
                    "on the next poll if it stays the same",
                    name,
                )
                continue
            self._attempted[name] = current
            log.info("model '%s' changed in the repository: loading it", name)
            try:
                self._load_source(source)
            except ServerError as exc:
                log.warning(
                    "model '%s' failed to load (%s); it is retried %s",
                    name,
                    exc.message,
                    "once its files change" if name in self._attempted else "on the next poll",
                )

    # --- explicit mode -----------------------------------------------------------------------

    def check_explicit(self) -> None:
        if self.mode != "explicit":
            raise unavailable(NOT_ALLOWED)

    def find(self, name: str) -> ModelSource | None:
        """Where the model is; None when no repository holds it (a repository that cannot be
        read makes that unknown: UNAVAILABLE with its reason)."""
        scan = scan_repositories(self.repositories)
        source = scan.models.get(name)
        if source is None and scan.failed:
            raise unavailable(f"model '{name}': " + "; ".join(scan.failed.values()))
        return source

    def load(self, name: str, config_json: str | None, files: dict[str, bytes]) -> None:
        """Load (or reload) ``name``, optionally with a JSON config and files (on a thread)."""
        self.check_explicit()
        if files and config_json is None:
            raise invalid_arg(
                f"failed to load '{name}': model files in a load request need the 'config' "
                "parameter too"
            )
        override = parse_config_override(name, config_json) if config_json is not None else None
        if files:
            temp_dir = write_files(name, files)
            self.manager.load(name, temp_dir, override, temp_dir=temp_dir)
            return
        source = self.find(name)
        if source is None:
            raise invalid_arg(
                f"failed to load '{name}': no model folder '{name}' in the model repositories"
            )
        self._load_source(source, override)

    def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Unload every version of ``name``. No model here depends on another (no ensembles),
        so ``unload_dependents`` has nothing more to unload."""
        self.check_explicit()
        if name not in self.manager.models:
            if self.find(name) is None:
                raise not_found(f"failed to unload '{name}': no such model")
            return
        self.manager.unload(name)

    def unloaded_names(self) -> list[str]:
        """Models of the repositories that were never loaded (for the repository index)."""
        return [
            n for n in scan_repositories(self.repositories).models if n not in self.manager.models
        ]
