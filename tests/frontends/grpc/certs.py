"""Certificates made on the spot with the openssl command: a CA, and leaf certificates it signs."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(directory: Path) -> tuple[Path, Path]:
    """A self-signed CA certificate and its key."""
    cert, key = directory / "ca.pem", directory / "ca.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", str(key), "-out", str(cert),
    )  # fmt: skip
    return cert, key


def make_leaf(directory: Path, name: str, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by ``ca``, usable by a server or a client."""
    cert, key, csr = directory / f"{name}.pem", directory / f"{name}.key", directory / f"{name}.csr"
    extensions = directory / f"{name}.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
        "-keyout", str(key), "-out", str(csr),
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-CAcreateserial", "-days", "1", "-extfile", str(extensions), "-out", str(cert),
    )  # fmt: skip
    return cert, key
