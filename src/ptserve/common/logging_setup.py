"""Log lines in the reference server's shape: ``I1202 17:30:00.123456 1234 module] message``,
or one JSON object per line (``json``) for log pipelines.

A log line about a request carries its id, model and version in the ``json`` format: the core
sets ``REQUEST`` (a ContextVar) while a request runs on the event loop, and code on another
thread that logs about requests (a worker whose batch failed) passes ``request_fields(...)`` as
the record's ``extra``.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import time
from collections.abc import MutableMapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import orjson

_LEVEL_LETTER = {
    logging.DEBUG: "V",
    logging.INFO: "I",
    logging.WARNING: "W",
    logging.ERROR: "E",
    logging.CRITICAL: "E",
}


@dataclass(frozen=True, slots=True)
class RequestFields:
    """What a log line says about the request, or the batch of requests, it concerns."""

    model: str = ""
    version: str = ""  # the version asked for ("" when the client left it to the server)
    request_id: str = ""
    request_ids: tuple[str, ...] = ()  # a batch's requests


# The request the current asyncio Task (or thread) is working for; None outside requests.
REQUEST: ContextVar[RequestFields | None] = ContextVar("ptserve_request", default=None)
_EXTRA_KEY = "ptserve_request"
_SOURCE_KEY = "ptserve_source"


class SourceLogger(logging.LoggerAdapter[logging.Logger]):
    """The logger of a module compiled to C (see setup.py): its functions have no Python frames,
    so ``logging`` would name the nearest interpreted caller (``threading.py``) as the line's
    origin. Each record carries the module's file name instead; its line is given as 0."""

    def __init__(self, name: str, source_file: str) -> None:
        compiled = not source_file.endswith(".py")
        stem = os.path.basename(source_file).split(".", 1)[0]
        super().__init__(logging.getLogger(name), {_SOURCE_KEY: stem} if compiled else {})

    def process(self, msg: object, kwargs: MutableMapping[str, Any]) -> tuple[object, Any]:
        if self.extra:
            kwargs["extra"] = {**self.extra, **(kwargs.get("extra") or {})}
        return msg, kwargs


def module_logger(name: str, source_file: str) -> SourceLogger:
    """``module_logger("ptserve.scheduling", __file__)``: a logger named ``name`` whose lines
    name ``source_file`` as their origin, compiled or not."""
    return SourceLogger(name, source_file)


def _origin(record: logging.LogRecord) -> tuple[str, int]:
    """The module (without ``.py``) and line a record came from."""
    source = getattr(record, _SOURCE_KEY, None)
    if isinstance(source, str):
        return source, 0
    return record.module, record.lineno


def request_fields(model: str, version: str, ids: Sequence[str]) -> dict[str, RequestFields]:
    """``extra=`` for a log call about a batch, from a thread that runs no request's context."""
    return {_EXTRA_KEY: RequestFields(model, version, request_ids=tuple(ids))}


# Ids for requests that came without one: unique in this process, and across processes with
# overwhelming likelihood (a random prefix per process).
_ID_PREFIX = os.urandom(4).hex()
_ID_COUNTER = itertools.count(1)


def new_request_id() -> str:
    return f"{_ID_PREFIX}-{next(_ID_COUNTER)}"


_LEVEL_NAME = {logging.DEBUG: "VERBOSE", logging.CRITICAL: "ERROR"}


class TritonFormatter(logging.Formatter):
    """``default``: ``I1202 17:30:00.123456``; ``ISO8601``: ``2026-12-02T17:30:00Z I``;
    ``json``: one object per line (see ``json_line``)."""

    def __init__(self, log_format: str = "default") -> None:
        super().__init__()
        self.log_format = log_format
        self.pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        if self.log_format == "json":
            return self.json_line(record)
        letter = _LEVEL_LETTER.get(record.levelno, "I")
        seconds = record.created
        micros = int((seconds - int(seconds)) * 1_000_000)
        module, line = _origin(record)
        if self.log_format == "ISO8601":
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
            prefix = f"{stamp} {letter} {self.pid} {module}.py:{line}]"
        else:
            stamp = time.strftime("%m%d %H:%M:%S", time.localtime(seconds))
            prefix = f"{letter}{stamp}.{micros:06d} {self.pid} {module}.py:{line}]"
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return f"{prefix} {message}"

    def json_line(self, record: logging.LogRecord) -> str:
        """``time`` (UTC, microseconds), ``level`` (VERBOSE, INFO, WARNING, ERROR), ``logger``,
        ``file`` (name:line), ``pid``, ``thread``, ``message`` (with the traceback, if any,
        in ``exception``), and where the line concerns requests: ``model``,
        ``model_version``, and ``request_id`` (one request) or ``request_ids`` (a batch; with
        ``request_id`` too when the batch held one request)."""
        seconds = record.created
        micros = int((seconds - int(seconds)) * 1_000_000)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        entry: dict[str, object] = {
            "time": f"{stamp}.{micros:06d}Z",
            "level": _LEVEL_NAME.get(record.levelno, record.levelname),
            "logger": record.name,
            "file": "{}.py:{}".format(*_origin(record)),
            "pid": self.pid,
            "thread": record.threadName,
            "message": record.getMessage(),
        }
        fields = getattr(record, _EXTRA_KEY, None) or REQUEST.get()
        if isinstance(fields, RequestFields):
            if fields.model:
                entry["model"] = fields.model
            if fields.version:
                entry["model_version"] = fields.version
            if fields.request_ids:
                entry["request_ids"] = list(fields.request_ids)
                if len(fields.request_ids) == 1:  # so a filter on request_id finds it too
                    entry["request_id"] = fields.request_ids[0]
            elif fields.request_id:
                entry["request_id"] = fields.request_id
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.stack_info:
            entry["exception"] = record.stack_info
        return orjson.dumps(entry, default=str).decode()


@dataclass(slots=True)
class LogSettings:
    """What the log flags and the logging extension control; changes apply at once."""

    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"
    # Derived by ``apply``: whether each request is given an id and a log context (json
    # lines, or verbose lines about requests); one attribute the request path checks.
    per_request: bool = False

    def as_dict(self) -> dict[str, bool | int | str]:
        return {
            "log_file": "",
            "log_info": self.log_info,
            "log_warning": self.log_warning,
            "log_error": self.log_error,
            "log_verbose_level": self.log_verbose_level,
            "log_format": self.log_format,
        }


LOG_FORMATS = ("default", "ISO8601", "json")

_settings = LogSettings()
_formatter = TritonFormatter()


class _SeverityFilter(logging.Filter):
    """Lets through only the severities the settings enable (they are not a simple threshold:
    info can be off while errors stay on, and the other way round)."""

    def filter(self, record: logging.LogRecord) -> bool:
        level = record.levelno
        if level >= logging.ERROR:
            return _settings.log_error
        if level >= logging.WARNING:
            return _settings.log_warning
        if level >= logging.INFO:
            return _settings.log_info
        return _settings.log_verbose_level > 0


def settings() -> LogSettings:
    """The live settings (the one object the filter and the formatter read)."""
    return _settings


def apply(new: LogSettings) -> None:
    """Make ``new`` the live settings: levels and format change for every later record."""
    if new.log_format not in LOG_FORMATS:
        raise ValueError(f"unknown log format '{new.log_format}'")
    _settings.log_info = new.log_info
    _settings.log_warning = new.log_warning
    _settings.log_error = new.log_error
    _settings.log_verbose_level = new.log_verbose_level
    _settings.log_format = new.log_format
    _settings.per_request = new.log_format == "json" or new.log_verbose_level > 0
    _formatter.log_format = new.log_format
    root = logging.getLogger("ptserve")
    root.setLevel(logging.DEBUG if new.log_verbose_level > 0 else logging.INFO)


def configure(
    verbose: int = 0,
    log_format: str = "default",
    info: bool = True,
    warning: bool = True,
    error: bool = True,
) -> None:
    """Route ptserve's loggers to stderr with the severities the flags ask for. The warnings
    of the libraries it uses (and Python's ``warnings``) are written in the same format, so
    that with ``json`` every line of the log is a JSON object."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_formatter)
    handler.addFilter(_SeverityFilter())
    ours = logging.getLogger("ptserve")
    ours.handlers[:] = [handler]
    ours.propagate = False
    logging.getLogger().handlers[:] = [handler]
    logging.captureWarnings(True)
    apply(LogSettings(info, warning, error, max(verbose, 0), log_format))
