"""Log lines in the reference server's shape: ``I1202 17:30:00.123456 1234 module] message``."""

from __future__ import annotations

import logging
import os
import sys
import time

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


def configure(verbose: int = 0, log_format: str = "default", info: bool = True) -> None:
    """Route ptserve's loggers to stderr at the level the flags ask for."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TritonFormatter(log_format))
    root = logging.getLogger("ptserve")
    root.handlers[:] = [handler]
    root.propagate = False
    if verbose > 0:
        root.setLevel(logging.DEBUG)
    elif info:
        root.setLevel(logging.INFO)
    else:
        root.setLevel(logging.WARNING)
