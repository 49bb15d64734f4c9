"""A real S3-compatible server for the tests: moto's server mode on a free loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import boto3

from tests.deploy.helpers import wait_for_port
from tests.serverproc import free_port

MOTO_SERVER = Path(sys.executable).with_name("moto_server")

# What a client of the test server needs: made-up credentials, a region, no metadata service.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "ptserve-test",
    "AWS_SECRET_ACCESS_KEY": "ptserve-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def no_credentials_env() -> dict[str, str]:
    """An environment in which boto3 finds no credentials at all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_EC2_METADATA_DISABLED="true",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent/credentials",
        AWS_CONFIG_FILE="/nonexistent/config",
        AWS_DEFAULT_REGION="us-east-1",
    )
    return env


class S3Server:
    def __init__(self) -> None:
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log", delete=False)  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, **CREDENTIALS),
        )
        wait_for_port(self.port)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, bucket: str, prefix: str = "") -> str:
        """The reference server's form for a private S3 endpoint: s3://host:port/bucket/path."""
        return f"s3://127.0.0.1:{self.port}/{bucket}/{prefix}".rstrip("/")

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        )

    def upload_tree(self, folder: Path, bucket: str, prefix: str) -> list[str]:
        """Upload every file under ``folder`` as ``prefix/<relative path>``; returns the keys."""
        client = self.client()
        keys = []
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                key = f"{prefix}/{path.relative_to(folder).as_posix()}".lstrip("/")
                client.upload_file(str(path), bucket, key)
                keys.append(key)
        return keys

    def delete_prefix(self, bucket: str, prefix: str) -> None:
        client = self.client()
        listing = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
        for item in listing.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=item["Key"])

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
