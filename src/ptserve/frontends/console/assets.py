"""The console's files, read once from the package and served from memory.

A request names a file; the answer is looked up by that exact name in the table built at
start, so no part of a request ever becomes a filesystem path: ``..``, encoded slashes,
absolute paths and NUL bytes simply name nothing. Every file type shipped has its content type
here, and loading refuses a file of any other type, so nothing is served as a guess.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable

STATIC_PACKAGE = "ptserve.frontends.console"
STATIC_FOLDER = "static"
INDEX = "index.html"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}

# The page loads only its own files and calls only its own origin: no inline script or style,
# no other origin, no framing, no form posts elsewhere.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cache-Control", "no-cache"),
)


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def content_type_of(name: str) -> str:
    """The content type of a shipped file; ValueError for a type the console does not ship."""
    dot = name.rfind(".")
    content_type = CONTENT_TYPES.get(name[dot:].lower()) if dot > 0 else None
    if content_type is None:
        raise ValueError(
            f"console file '{name}' has no known content type; known: {', '.join(CONTENT_TYPES)}"
        )
    return content_type


def make_asset(name: str, body: bytes) -> Asset:
    digest = hashlib.sha256(body).hexdigest()[:20]
    return Asset(body, content_type_of(name), f'"{digest}"')


def _walk(folder: Traversable, prefix: str) -> dict[str, Asset]:
    found: dict[str, Asset] = {}
    for entry in folder.iterdir():
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        name = prefix + entry.name
        if entry.is_dir():
            found.update(_walk(entry, name + "/"))
        elif entry.is_file():
            found[name] = make_asset(name, entry.read_bytes())
    return found


def load_static() -> dict[str, Asset]:
    """Every file under ``static/``, by its path relative to that folder ("js/main.js")."""
    folder = resources.files(STATIC_PACKAGE) / STATIC_FOLDER
    found = _walk(folder, "")
    if INDEX not in found:
        raise ValueError(f"the console's {INDEX} is missing from the package")
    return found
