#!/usr/bin/env python3
"""Several ptserve replicas behind HAProxy on one machine: the shape of a Kubernetes Service
in front of a Deployment, without a cluster.

    python deploy/local/cluster.py --replicas 3 --http-port 9000 --grpc-port 9001 \
        --model-repository examples/model_repository [-- EXTRA PTSERVE FLAGS]

- HTTP on --http-port and gRPC (HTTP/2, h2c) on --grpc-port go to the replicas that HAProxy's
  health check (GET /v2/health/ready every 500 ms) finds ready.
- A replica that receives SIGTERM turns unready, refuses new requests with 503 and finishes
  those in flight; HAProxy retries a refused or failed request on another replica (retry-on
  conn-failure empty-response 503, redispatch), so clients see no error. A replica that exits
  is started again on the same ports (as a Deployment's pod is replaced), and rejoins once its
  health check passes: SIGTERM to each replica in turn is a rolling restart.
- Sequence batching keeps a sequence's state in the replica that started it, so every request
  of a sequence must reach that replica. The correlation id travels inside the request body,
  which a load balancer does not read; clients therefore also send it in the X-Sequence-Id
  header (HTTP) or metadata (gRPC), and requests that carry it are routed by a consistent hash
  of it. Other requests are balanced round robin.

--state FILE receives JSON with the ports and process ids (rewritten on every restart);
SIGTERM or SIGINT stops HAProxy and every replica.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SEQUENCE_HEADER = "x-sequence-id"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Replica:
    name: str
    http: int = field(default_factory=free_port)
    grpc: int = field(default_factory=free_port)
    metrics: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0


def haproxy_config(address: str, http: int, grpc: int, replicas: list[Replica], run: Path) -> str:
    def servers(port: str, extra: str = "") -> str:
        lines = []
        for r in replicas:
            target = r.http if port == "http" else r.grpc
            lines.append(f"    server {r.name} 127.0.0.1:{target} check port {r.http}{extra}")
        return "\n".join(lines)

    h2 = " proto h2 check-proto h1"
    return f"""
global
    stats socket {run}/admin.sock mode 600 level admin
    maxconn 4096

defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 10s
    retries 3
    option redispatch 1
    # A replica that is stopping refuses new requests with 503 before any work is done, and a
    # stopped one refuses connections: both are safe to send elsewhere.
    retry-on conn-failure empty-response 503
    option httpchk GET /v2/health/ready
    http-check expect status 200
    # Two failed checks take a replica out: one slow answer from a busy machine must not empty
    # the pool (with every replica out HAProxy itself answers 503). A stopping replica's 503s
    # meanwhile are retried elsewhere.
    timeout check 2s
    default-server inter 500ms fastinter 250ms fall 2 rise 2

frontend http
    bind {address}:{http}
    use_backend http_sequences if {{ req.hdr({SEQUENCE_HEADER}) -m found }}
    default_backend http_replicas

backend http_replicas
    balance roundrobin
{servers("http")}

backend http_sequences
    balance hdr({SEQUENCE_HEADER})
    hash-type consistent
{servers("http")}

frontend grpc
    bind {address}:{grpc} proto h2
    use_backend grpc_sequences if {{ req.hdr({SEQUENCE_HEADER}) -m found }}
    default_backend grpc_replicas

backend grpc_replicas
    balance roundrobin
{servers("grpc", h2)}

backend grpc_sequences
    balance hdr({SEQUENCE_HEADER})
    hash-type consistent
{servers("grpc", h2)}
"""


class Cluster:
    def __init__(self, args: argparse.Namespace, ptserve_args: list[str]) -> None:
        self.args = args
        self.ptserve_args = ptserve_args
        self.replicas = [Replica(f"r{i}") for i in range(args.replicas)]
        self.keep = args.run_dir is not None
        self.run = args.run_dir or Path(tempfile.mkdtemp(prefix="ptserve-cluster-"))
        self.run.mkdir(parents=True, exist_ok=True)
        self.haproxy: subprocess.Popen[bytes] | None = None
        self.stopping = False

    def start_replica(self, replica: Replica) -> None:
        command = [sys.executable, "-m", "ptserve"]
        for repository in self.args.model_repository:
            command += ["--model-repository", repository]
        command += [
            "--http-port", str(replica.http), "--grpc-port", str(replica.grpc),
            "--metrics-port", str(replica.metrics), "--http-address", "127.0.0.1",
            "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
            "--id", replica.name, *self.ptserve_args,
        ]  # fmt: skip
        log = open(self.run / f"{replica.name}.log", "ab")  # noqa: SIM115 - the child keeps it
        replica.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        replica.starts += 1
        print(f"replica {replica.name} started (pid {replica.process.pid})", flush=True)

    def start(self) -> None:
        for replica in self.replicas:
            self.start_replica(replica)
        config = self.run / "haproxy.cfg"
        config.write_text(
            haproxy_config(
                self.args.address, self.args.http_port, self.args.grpc_port, self.replicas, self.run
            )
        )
        haproxy = shutil.which(self.args.haproxy) or self.args.haproxy
        with open(self.run / "haproxy.log", "ab") as log:
            self.haproxy = subprocess.Popen(
                [haproxy, "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
            )
        self.write_state()
        print(
            f"load balancer on http://{self.args.address}:{self.args.http_port} and gRPC "
            f"{self.args.address}:{self.args.grpc_port} ({len(self.replicas)} replicas; logs in "
            f"{self.run})",
            flush=True,
        )

    def write_state(self) -> None:
        if not self.args.state:
            return
        state = {
            "http_port": self.args.http_port,
            "grpc_port": self.args.grpc_port,
            "admin_socket": str(self.run / "admin.sock"),
            "logs": str(self.run),
            "haproxy_pid": self.haproxy.pid if self.haproxy else None,
            "replicas": [
                {
                    "name": r.name,
                    "pid": r.process.pid if r.process else None,
                    "http_port": r.http,
                    "grpc_port": r.grpc,
                    "metrics_port": r.metrics,
                    "starts": r.starts,
                }
                for r in self.replicas
            ],
        }
        temporary = Path(f"{self.args.state}.tmp")
        temporary.write_text(json.dumps(state, indent=2))
        os.replace(temporary, self.args.state)

    def supervise(self) -> int:
        """Restart replicas that exit, until asked to stop; HAProxy exiting is fatal."""
        while not self.stopping:
            assert self.haproxy is not None
            if self.haproxy.poll() is not None:
                print(f"haproxy exited with {self.haproxy.returncode}", file=sys.stderr)
                self.stop()
                return 1
            for replica in self.replicas:
                assert replica.process is not None
                code = replica.process.poll()
                if code is not None and not self.stopping:
                    print(f"replica {replica.name} exited with {code}: starting it again")
                    self.start_replica(replica)
                    self.write_state()
            time.sleep(0.1)
        return 0

    def stop(self, *_: object) -> None:
        self.stopping = True
        for replica in self.replicas:
            if replica.process is not None and replica.process.poll() is None:
                replica.process.send_signal(signal.SIGTERM)
        for replica in self.replicas:
            if replica.process is not None:
                try:
                    replica.process.wait(60)
                except subprocess.TimeoutExpired:
                    replica.process.kill()
                    replica.process.wait()
        if self.haproxy is not None and self.haproxy.poll() is None:
            self.haproxy.terminate()
            self.haproxy.wait(10)
        if not self.keep:
            shutil.rmtree(self.run, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--model-repository", action="append", required=True)
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, default=9000)
    parser.add_argument("--grpc-port", type=int, default=9001)
    parser.add_argument("--haproxy", default="haproxy")
    parser.add_argument("--state", type=Path, default=None, help="write ports and pids here")
    parser.add_argument(
        "--run-dir", type=Path, default=None, help="keep HAProxy's config and the logs here"
    )
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    cluster = Cluster(args, extra)
    signal.signal(signal.SIGTERM, cluster.stop)
    signal.signal(signal.SIGINT, cluster.stop)
    cluster.start()
    return cluster.supervise()


if __name__ == "__main__":
    sys.exit(main())
