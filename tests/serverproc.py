"""Starting the real ``ptserve`` process on free ports, for tests that talk to it over the wire."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: each socket stays bound until all are picked, so the
    kernel cannot hand the same port out twice (a server's own ports would then clash)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class ServerProcess:
    """``python -m ptserve`` with its own ports and log file."""

    def __init__(
        self,
        repositories: Sequence[Path],
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.repositories = list(repositories)
        self.args = list(args)
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self.env = dict(os.environ, **(env or {}))
        self.env.setdefault("OMP_NUM_THREADS", "1")
        self.log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the process
            prefix="ptserve-", suffix=".log", delete=False
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"127.0.0.1:{self.metrics_port}"

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "ptserve"]
        for repository in self.repositories:
            command += ["--model-repository", str(repository)]
        command += [
            "--http-port",
            str(self.http_port),
            "--grpc-port",
            str(self.grpc_port),
            "--metrics-port",
            str(self.metrics_port),
            "--http-address",
            "127.0.0.1",
            "--grpc-address",
            "127.0.0.1",
            "--metrics-address",
            "127.0.0.1",
        ]
        return command + self.args

    def start(self, wait: str | None = "ready", timeout: float = 120.0) -> ServerProcess:
        """Start; ``wait`` is "ready", "live" or None (do not wait)."""
        self.process = subprocess.Popen(
            self.command(), stdout=self.log_file, stderr=subprocess.STDOUT, env=self.env
        )
        if wait is not None:
            try:
                self.wait_for(wait, timeout)
            except BaseException:  # a server that never got ready must not outlive its test
                self.stop(signal.SIGKILL, 10)
                raise
        return self

    def status(self, path: str) -> int | None:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}{path}", timeout=2) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (OSError, urllib.error.URLError):
            return None

    def wait_for(self, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"ptserve exited with {self.process.returncode} before it was {what}:\n"
                    + self.log()
                )
            if self.status(f"/v2/health/{what}") == 200:
                return
            time.sleep(0.1)
        raise TimeoutError(f"ptserve was not {what} after {timeout} s:\n{self.log()}")

    def wait_exit(self, timeout: float = 60.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)

    def log(self) -> str:
        self.log_file.flush()
        return Path(self.log_file.name).read_text(errors="replace")

    def __enter__(self) -> ServerProcess:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
