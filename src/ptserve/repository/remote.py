"""Model repositories in object storage, copied into a local cache before a model loads.

A remote repository is a prefix of a bucket (``s3://bucket/path``). Each scan lists the objects
under it; a model's fingerprint is the key, size and ETag of each of its objects, so a changed
object changes it (poll mode then reloads the model). Loading a model brings its folder up to
date in the cache's mirror (only objects whose size or ETag changed are downloaded, also across
restarts when the cache folder is kept) and gives the manager a snapshot of it made of hard
links: a later download replaces a mirror file, never a file a loaded version was read from.

Object keys come from whoever can write to the bucket: a key that would leave the cache folder
(``..``, empty parts, backslashes) is refused and logged, never written.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ptserve.common.errors import ServerError, unavailable
from ptserve.config.parse import CONFIG_FILENAME
from ptserve.repository.layout import (
    LocalModel,
    ModelSource,
    RepositoryOptions,
    is_safe_name,
    link_versionless,
    looks_like_model,
    process_alive,
    single_model_name,
)

log = logging.getLogger("ptserve.repository")

SCHEMES = ("s3",)
# Where the reference server copies remote repositories, by scheme; also honoured here.
MOUNT_DIRECTORY_ENV = {"s3": "TRITON_AWS_MOUNT_DIRECTORY"}
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_HOST_PORT = re.compile(r"^[A-Za-z0-9.\-]+:[0-9]{1,5}$|^\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}$")


@dataclass(frozen=True, slots=True)
class RemoteLocation:
    """A parsed ``--model-repository`` URL of an object store."""

    text: str  # as given
    scheme: str  # "s3"
    bucket: str
    prefix: str  # "" or "path/to/repository/"
    endpoint: str = ""  # "" (the provider's own) or "http(s)://host:port"

    @property
    def folder_name(self) -> str:
        """The last part of the path: the name of a single model stored there."""
        return self.prefix.rstrip("/").rpartition("/")[2] or self.bucket


def is_remote(location: str) -> bool:
    return "://" in location


def parse_location(text: str) -> RemoteLocation:
    """``s3://bucket/path``, ``s3://host:port/bucket/path`` (plain HTTP) or
    ``s3://https://host:port/bucket/path``, as the reference server writes them.

    Raises ValueError saying what was expected.
    """
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ValueError(
            f"model repository '{text}': unsupported scheme '{scheme}://' (expected a local path "
            f"or one of {', '.join(s + '://' for s in SCHEMES)})"
        )
    endpoint = ""
    explicit = re.match(r"^(https?)://", rest)
    if explicit is not None:
        protocol = explicit.group(1)
        host, _, rest = rest[explicit.end() :].partition("/")
        if not host:
            raise ValueError(f"model repository '{text}': expected s3://{protocol}://host:port/...")
        endpoint = f"{protocol}://{host}"
    else:
        first, _, after = rest.partition("/")
        if ":" in first:
            if not _HOST_PORT.match(first):
                raise ValueError(
                    f"model repository '{text}': '{first}' is neither a bucket name nor host:port"
                )
            endpoint, rest = f"http://{first}", after
    bucket, _, path = rest.partition("/")
    if not bucket:
        raise ValueError(f"model repository '{text}': no bucket name (expected s3://bucket/path)")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ValueError(
            f"model repository '{text}': '{bucket}' is not a valid bucket name (3 to 63 "
            "lowercase letters, digits, '.' and '-')"
        )
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") or "\\" in p for p in parts):
        raise ValueError(f"model repository '{text}': the path may not contain '.', '..' or '\\'")
    prefix = "".join(p + "/" for p in parts)
    return RemoteLocation(text, scheme, bucket, prefix, endpoint)


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str  # relative to the repository's prefix
    size: int
    etag: str  # changes whenever the object's content does


class ObjectStore(Protocol):
    """What a remote repository needs of a storage service. Failures raise ServerError with
    a message that names the repository and what to check."""

    def list(self) -> list[StoredObject]:
        """Every object under the repository's prefix, keys relative to it."""
        ...

    def download(self, key: str, target: Path) -> None: ...

    def read(self, key: str) -> bytes:
        """A small object's content (a config file)."""
        ...


def safe_parts(key: str) -> list[str] | None:
    """The path parts of a relative key; None for a key that could leave its folder."""
    parts = key.split("/")
    if any(p in ("", ".", "..") or "\\" in p or "\x00" in p for p in parts):
        return None
    return parts


def default_cache_root(scheme: str, options: RepositoryOptions) -> Path | None:
    if options.cache_dir is not None:
        return options.cache_dir
    env = os.environ.get(MOUNT_DIRECTORY_ENV.get(scheme, ""), "")
    return Path(env) if env else None


@dataclass(slots=True)
class _Model:
    """What a scan found of one model: its objects, keyed relative to the model folder."""

    prefix: str
    objects: list[StoredObject]


@dataclass(slots=True)
class RemoteRepository:
    """A repository in an object store, read through a local cache folder."""

    where: RemoteLocation
    store: ObjectStore
    options: RepositoryOptions = field(default_factory=RepositoryOptions)
    root: Path = field(init=False)
    _owned: bool = field(init=False, default=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _counter: Iterator[int] = field(init=False, default_factory=lambda: itertools.count(1))
    _config_names: dict[str, str] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        base = default_cache_root(self.where.scheme, self.options)
        if base is None:
            base = Path(tempfile.mkdtemp(prefix="ptserve-repository-"))
            self._owned = True
        digest = hashlib.sha256(self.where.text.encode()).hexdigest()[:16]
        self.root = base / f"{self.where.scheme}-{self.where.bucket}-{digest}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(
                f"model repository '{self.where.text}': cannot create the cache folder "
                f"{self.root}: {exc.strerror}"
            ) from None
        self._remove_stale_snapshots()
        atexit.register(self.close)

    @property
    def location(self) -> str:
        return self.where.text

    # --- scanning ------------------------------------------------------------------------------

    def scan(self) -> dict[str, ModelSource]:
        objects: list[StoredObject] = []
        for item in self.store.list():
            if item.key.endswith("/") and item.size == 0:
                continue  # a "folder" marker some tools write
            if safe_parts(item.key) is None:
                log.warning(
                    "model repository '%s': ignoring the object '%s' (a key with empty, '.' or "
                    "'..' parts or backslashes cannot be copied safely)",
                    self.location,
                    item.key,
                )
                continue
            objects.append(item)
        if not objects:
            raise unavailable(
                f"model repository '{self.location}': no objects under "
                f"{self.where.scheme}://{self.where.bucket}/{self.where.prefix} "
                "(is the path right?)"
            )
        files = [o.key for o in objects if "/" not in o.key]
        folders = {o.key.partition("/")[0] for o in objects if "/" in o.key}
        if looks_like_model(files, folders):
            name = single_model_name(
                self.options, lambda: self._config_text(objects), self.where.folder_name
            )
            versionless = not any(f.isdigit() for f in folders)
            return {name: self._source(name, _Model("", objects), True, versionless)}
        models: dict[str, list[StoredObject]] = {}
        for item in objects:
            top, sep, rest = item.key.partition("/")
            if sep and not top.startswith("."):
                models.setdefault(top, []).append(StoredObject(rest, item.size, item.etag))
        return {
            name: self._source(name, _Model(name + "/", items), False, False)
            for name, items in sorted(models.items())
        }

    def _source(self, name: str, model: _Model, single: bool, versionless: bool) -> ModelSource:
        fingerprint = tuple(sorted((o.key, o.size, o.etag) for o in model.objects))
        location = f"{self.where.scheme}://{self.where.bucket}/{self.where.prefix}{model.prefix}"
        return ModelSource(name, location, fingerprint, self, single, versionless, model)

    def _config_text(self, objects: list[StoredObject]) -> str:
        """The root config of a single-model repository (read again only when it changes)."""
        config = next((o for o in objects if o.key == CONFIG_FILENAME), None)
        if config is None:
            return ""
        if config.etag not in self._config_names:
            self._config_names = {config.etag: self.store.read(config.key).decode(errors="replace")}
        return self._config_names[config.etag]

    # --- fetching ------------------------------------------------------------------------------

    def fetch(self, source: ModelSource) -> LocalModel:
        model = source.detail
        assert isinstance(model, _Model)
        if not is_safe_name(source.name):
            raise unavailable(f"model repository '{self.location}': bad model name '{source.name}'")
        mirror = self.root / "mirror" / source.name
        snapshot = (
            self.root / "snapshots" / str(os.getpid()) / f"{source.name}-{next(self._counter)}"
        )
        with self._lock, self._file_lock():
            self._sync(source.name, model, mirror)
            target = snapshot / source.name
            try:
                if source.versionless:
                    link_versionless(mirror, target, _hardlink)
                else:
                    shutil.copytree(mirror, target, copy_function=os.link)
            except OSError as exc:
                shutil.rmtree(snapshot, ignore_errors=True)
                raise unavailable(
                    f"model '{source.name}': cannot lay out its files in the cache {snapshot}: "
                    f"{exc}"
                ) from None
        return LocalModel(target, snapshot)

    def _sync(self, name: str, model: _Model, mirror: Path) -> None:
        """Make the mirror folder hold exactly the model's objects, downloading what changed."""
        manifest_path = self.root / "manifests" / f"{name}.json"
        manifest = _read_manifest(manifest_path)
        wanted: dict[str, StoredObject] = {o.key: o for o in model.objects}
        mirror.mkdir(parents=True, exist_ok=True)
        downloaded = 0
        for key, item in sorted(wanted.items()):
            target = mirror.joinpath(*key.split("/"))
            if manifest.get(key) == [item.size, item.etag] and _size(target) == item.size:
                continue
            if target.is_dir():
                raise unavailable(
                    f"model '{name}': the object '{model.prefix}{key}' is also a folder of "
                    "other objects"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.partial")
            self.store.download(model.prefix + key, partial)
            if _size(partial) != item.size:
                partial.unlink(missing_ok=True)
                raise unavailable(
                    f"model '{name}': the object '{model.prefix}{key}' changed while it was "
                    "downloaded; it is fetched again on the next load"
                )
            os.replace(partial, target)
            manifest[key] = [item.size, item.etag]
            downloaded += 1
        for path in sorted(mirror.rglob("*"), reverse=True):  # files first, then empty folders
            relative = path.relative_to(mirror).as_posix()
            if path.is_dir():
                with contextlib.suppress(OSError):
                    path.rmdir()
            elif relative not in wanted:
                path.unlink(missing_ok=True)
        manifest = {k: v for k, v in manifest.items() if k in wanted}
        manifest_path.parent.mkdir(parents=True, exist_ok=True)
        manifest_path.write_text(json.dumps(manifest, sort_keys=True))
        log.info(
            "model '%s': %d of %d file(s) downloaded from %s into %s",
            name,
            downloaded,
            len(wanted),
            self.location,
            mirror,
        )

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """One process at a time updates a cache folder that several processes share."""
        with open(self.root / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _remove_stale_snapshots(self) -> None:
        snapshots = self.root / "snapshots"
        if not snapshots.is_dir():
            return
        for folder in snapshots.iterdir():
            if folder.name.isdigit() and not process_alive(int(folder.name)):
                shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        """Remove this process's snapshots, and the whole cache when it was a temporary one."""
        shutil.rmtree(self.root / "snapshots" / str(os.getpid()), ignore_errors=True)
        if self._owned:
            shutil.rmtree(self.root.parent, ignore_errors=True)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else -1
    except OSError:
        return -1


def _hardlink(entry: Path, at: Path) -> None:
    if entry.is_dir():
        shutil.copytree(entry, at, copy_function=os.link)
    else:
        os.link(entry, at)


def _read_manifest(path: Path) -> dict[str, list[int | str]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def store_error(where: RemoteLocation, what: str) -> ServerError:
    return unavailable(f"model repository '{where.text}': {what}")
