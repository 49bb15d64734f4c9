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
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from google.protobuf import json_format

from ptserve.common.errors import ServerError, invalid_arg, not_found, unavailable
from ptserve.config.parse import ModelConfig
from ptserve.core.manager import ModelManager
from ptserve.repository import scan_repositories

log = logging.getLogger("ptserve.control")

CONTROL_MODES = ("none", "poll", "explicit")
NOT_ALLOWED = "explicit model load / unload is not allowed if polling is enabled"

# A model folder's state on disk: (relative path, size, mtime in ns) of every file in it.
Fingerprint = tuple[tuple[str, int, int], ...]


def fingerprint(model_dir: Path) -> Fingerprint:
    """What changes whenever any file of the model folder is added, removed or rewritten."""
    entries: list[tuple[str, int, int]] = []
    try:
        for path in sorted(model_dir.rglob("*")):
            relative = path.relative_to(model_dir)
            if any(part.startswith(".") for part in relative.parts):
                continue
            stat = path.stat()
            size = stat.st_size if path.is_file() else -1
            entries.append((relative.as_posix(), size, stat.st_mtime_ns))
    except OSError:  # a file vanished while we looked: the folder is changing
        entries.append(("", -2, 0))
    return tuple(entries)


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
        repositories: list[Path],
        mode: str = "none",
        load_models: Iterable[str] = (),
        poll_secs: float = 15.0,
        load_threads: int = 4,
    ) -> None:
        if mode not in CONTROL_MODES:
            raise ValueError(f"unknown model control mode '{mode}'")
        self.manager = manager
        self.repositories = repositories
        self.mode = mode
        self.load_models = list(load_models)
        self.poll_secs = poll_secs
        self.load_threads = load_threads
        self._attempted: dict[str, Fingerprint] = {}  # what the last load of a model saw
        self._seen: dict[str, Fingerprint] = {}  # what the last poll saw
        self._poller: asyncio.Task[None] | None = None

    # --- startup -----------------------------------------------------------------------------

    async def start(self) -> list[str]:
        """Load what the mode loads at start (logging progress); returns the failures."""
        scan = scan_repositories(self.repositories)
        failures: list[str] = []
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

    async def _load_many(self, targets: dict[str, Path]) -> list[str]:
        total = len(targets)
        if total:
            log.info("loading %d model(s): %s", total, ", ".join(targets))
        done = 0
        failures: list[str] = []

        def load(name: str, path: Path) -> None:
            nonlocal done
            self._attempted[name] = self._seen[name] = fingerprint(path)
            try:
                self.manager.load(name, path)
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
        for name in list(self._attempted):
            if name not in scan.models:
                self._attempted.pop(name)
                self._seen.pop(name, None)
                if name in self.manager.models:
                    log.info("model '%s' left the repository: unloading it", name)
                    self.manager.unload(name, forget=True)
        for name, path in scan.models.items():
            current = fingerprint(path)
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
                self.manager.load(name, path)
            except ServerError as exc:
                log.warning(
                    "model '%s' failed to load (%s); it is retried once its files change",
                    name,
                    exc.message,
                )

    # --- explicit mode -----------------------------------------------------------------------

    def check_explicit(self) -> None:
        if self.mode != "explicit":
            raise unavailable(NOT_ALLOWED)

    def find(self, name: str) -> Path | None:
        return scan_repositories(self.repositories).models.get(name)

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
        path = self.find(name)
        if path is None:
            raise invalid_arg(
                f"failed to load '{name}': no model folder '{name}' in the model repositories"
            )
        self.manager.load(name, path, override)

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
