"""What a repository holds: model folders, and the single-model layouts KServe hands a runtime.

A repository is a folder of model folders (``<repository>/<model>/config.pbtxt``,
``<model>/1/model.pt``). A repository path may also be one model's own folder, as KServe mounts
a model's storage at ``/mnt/models``:

- ``config.pbtxt`` and version folders at its root (``/mnt/models/1/model.pt``);
- the model files at its root without a version folder (``/mnt/models/model.pt``, with or
  without ``config.pbtxt``): served as version 1.

Such a model is named by ``--model-name``, else by the ``name`` its config gives, else by the
folder. Both local folders and object stores are read through these rules.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ptserve.common.errors import ServerError
from ptserve.config.parse import CONFIG_FILENAME, ModelConfig, parse_config

log = logging.getLogger("ptserve.repository")

# Files at a folder's root that make it one model's folder rather than a repository.
MODEL_FILE_SUFFIXES = (".pt", ".pt2", ".pth", ".py")
# Entries of a model folder that belong to the model, not to a version.
MODEL_LEVEL = frozenset({CONFIG_FILENAME, "configs", "warmup"})
# The version a model without version folders is served as.
IMPLIED_VERSION = "1"


@dataclass(frozen=True, slots=True)
class RepositoryOptions:
    """What the command line decides about reading repositories."""

    # Where remote repositories are copied (None: a temporary folder, removed at exit).
    cache_dir: Path | None = None
    # The name of a model whose folder is itself a repository path (KServe's /mnt/models).
    model_name: str = ""


@dataclass(slots=True)
class LocalModel:
    """A model folder on local disk in the repository layout, ready for the manager.

    ``temp_dir``, when set, was made for this load and is removed once the model retires.
    """

    path: Path
    temp_dir: Path | None = None


@dataclass(slots=True)
class ModelSource:
    """One model found by a scan: where it is, and what changes when any of its files does."""

    name: str
    location: str
    fingerprint: Hashable
    repository: Repository
    single: bool = False  # the repository path is this model's own folder
    versionless: bool = False  # ... and it has no version folder (served as version 1)
    detail: object = None  # what the repository needs to fetch it

    def fetch(self) -> LocalModel:
        return self.repository.fetch(self)


class Repository(Protocol):
    """A model repository: a local folder or a prefix in an object store."""

    @property
    def location(self) -> str:
        """The path or URL as given, for messages."""
        ...

    def scan(self) -> dict[str, ModelSource]:
        """Every model it holds; raises ServerError when it cannot be read at all."""
        ...

    def fetch(self, source: ModelSource) -> LocalModel:
        """The model's folder on local disk (downloaded first where needed)."""
        ...

    def close(self) -> None: ...


def looks_like_model(files: Iterable[str], folders: Iterable[str]) -> bool:
    """Whether a folder's top-level entries are one model's rather than a repository's."""
    if any(folder.isdigit() for folder in folders):
        return True
    return any(name == CONFIG_FILENAME or name.endswith(MODEL_FILE_SUFFIXES) for name in files)


def configured_name(text: str, where: str) -> str:
    """The ``name`` a config file gives its model ("" when it gives none or cannot be read)."""
    try:
        config: ModelConfig = parse_config(text, where)
    except ServerError:
        return ""  # the load reports the broken config with its reason
    return str(config.name)


def single_model_name(
    options: RepositoryOptions, config_text: Callable[[], str], folder: str
) -> str:
    """``--model-name``, else the config's ``name``, else the folder's name."""
    if options.model_name:
        return options.model_name
    name = configured_name(config_text(), folder)
    if name and not is_safe_name(name):
        log.warning("ignoring the model name '%s' of %s's config: not a folder name", name, folder)
        name = ""
    return name or folder


def is_safe_name(name: str) -> bool:
    """A model name that is one folder name (it names folders in caches and staging areas)."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\x00")


# --- local folders -----------------------------------------------------------------------------

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


def link_versionless(source: Path, target: Path, link: Callable[[Path, Path], None]) -> None:
    """Lay out ``target`` as a model folder whose version 1 holds the files of ``source``.

    Every entry of ``source`` appears at the model level (config, labels, warmup samples);
    every entry but the config, custom configs and warmup samples also appears in ``1/``.
    """
    version = target / IMPLIED_VERSION
    version.mkdir(parents=True)
    for entry in sorted(source.iterdir()):
        if entry.name.startswith("."):
            continue
        link(entry, target / entry.name)
        if entry.name not in MODEL_LEVEL:
            link(entry, version / entry.name)


def _symlink(entry: Path, at: Path) -> None:
    at.symlink_to(entry.resolve(), target_is_directory=entry.is_dir())


@dataclass(slots=True)
class LocalRepository:
    """A folder on local disk: a repository of model folders, or one model's own folder."""

    path: Path
    options: RepositoryOptions = field(default_factory=RepositoryOptions)

    @property
    def location(self) -> str:
        return str(self.path)

    def scan(self) -> dict[str, ModelSource]:
        if not self.path.is_dir():
            log.error("model repository '%s' is not a directory", self.path)
            return {}
        children = [c for c in sorted(self.path.iterdir()) if not c.name.startswith(".")]
        files = [c.name for c in children if not c.is_dir()]
        folders = [c.name for c in children if c.is_dir()]
        if looks_like_model(files, folders):
            config = self.path / CONFIG_FILENAME
            name = single_model_name(
                self.options,
                lambda: config.read_text(errors="replace") if config.is_file() else "",
                self.path.name,
            )
            versionless = not any(folder.isdigit() for folder in folders)
            source = ModelSource(
                name, str(self.path), fingerprint(self.path), self, True, versionless
            )
            return {name: source}
        return {
            child.name: ModelSource(child.name, str(child), fingerprint(child), self)
            for child in children
            if child.is_dir()
        }

    def fetch(self, source: ModelSource) -> LocalModel:
        folder = Path(source.location)
        if not source.versionless:
            return LocalModel(folder)
        # The files stay where they are; a folder of links gives them a version folder.
        temp_dir = Path(tempfile.mkdtemp(prefix=f"ptserve-{source.name}-"))
        try:
            target = temp_dir / source.name
            link_versionless(folder, target, _symlink)
        except OSError:
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise
        log.info(
            "model '%s': no version folder in %s, its files are served as version %s",
            source.name,
            folder,
            IMPLIED_VERSION,
        )
        return LocalModel(target, temp_dir)

    def close(self) -> None:
        pass


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
