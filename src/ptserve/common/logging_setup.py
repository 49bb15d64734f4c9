"""Log lines in the reference server's shape: ``I1202 17:30:00.123456 1234 module] message``."""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass

_LEVEL_LETTER = {
    logging.DEBUG: "V",
    logging.INFO: "I",
    logging.WARNING: "W",
    logging.ERROR: "E",
    logging.CRITICAL: "E",
}


class TritonFormatter(logging.Formatter):
    """``default``: ``I1202 17:30:00.123456``; ``ISO8601``: ``2026-12-02T17:30:00Z I``."""

    def __init__(self, log_format: str = "default") -> None:
        super().__init__()
        self.log_format = log_format
        self.pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        letter = _LEVEL_LETTER.get(record.levelno, "I")
        seconds = record.created
        micros = int((seconds - int(seconds)) * 1_000_000)
        if self.log_format == "ISO8601":
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
            prefix = f"{stamp} {letter} {self.pid} {record.module}.py:{record.lineno}]"
        else:
            stamp = time.strftime("%m%d %H:%M:%S", time.localtime(seconds))
            prefix = f"{letter}{stamp}.{micros:06d} {self.pid} {record.module}.py:{record.lineno}]"
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return f"{prefix} {message}"


@dataclass(slots=True)
class LogSettings:
    """What the log flags and the logging extension control; changes apply at once."""

    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"

    def as_dict(self) -> dict[str, bool | int | str]:
        return {
            "log_file": "",
            "log_info": self.log_info,
            "log_warning": self.log_warning,
            "log_error": self.log_error,
            "log_verbose_level": self.log_verbose_level,
            "log_format": self.log_format,
        }


LOG_FORMATS = ("default", "ISO8601")

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
    """Route ptserve's loggers to stderr with the severities the flags ask for."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_formatter)
    handler.addFilter(_SeverityFilter())
    root = logging.getLogger("ptserve")
    root.handlers[:] = [handler]
    root.propagate = False
    apply(LogSettings(info, warning, error, max(verbose, 0), log_format))
