"""Model repositories in object storage, served from a real S3-compatible server (moto's
server mode), with ptserve started as a process and asked over the wire."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from ptserve.examples import Scale
from ptserve.repository.remote import parse_location
from tests.deploy.helpers import infer_scaled, scaled_config, wait_until, write_scaled
from tests.deploy.s3server import CREDENTIALS, S3Server, no_credentials_env
from tests.serverproc import ServerProcess

POLL = ["--model-control-mode", "poll", "--repository-poll-secs", "0.5"]


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def bucket(s3: S3Server, request: pytest.FixtureRequest) -> str:
    name = "pt-" + request.node.name.replace("_", "-").lower()[:50].strip("-")
    s3.client().create_bucket(Bucket=name)
    return name


def start(
    url: str,
    cache: Path,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    wait: str | None = "ready",
) -> ServerProcess:
    server = ServerProcess(
        [], ["--model-repository", url, "--repository-cache-dir", str(cache), *args], env=env
    )
    if env is not None:
        server.env = dict(env, OMP_NUM_THREADS="1")
    return server.start(wait=wait)


def test_serves_models_from_a_bucket(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    local = tmp_path / "local"
    write_scaled(local, "double", {1: 2.0})
    write_scaled(local, "versioned", {1: 1.0, 3: 3.0})
    keys = s3.upload_tree(local, bucket, "prod/models")
    assert "prod/models/double/1/model.pt" in keys
    cache = tmp_path / "cache"
    with start(s3.url(bucket, "prod/models"), cache, env=dict(os.environ, **CREDENTIALS)) as server:
        assert infer_scaled(server.http_url, "double") == 2.0
        assert infer_scaled(server.http_url, "versioned") == 3.0  # the latest version
        # The files were copied into the cache folder given on the command line.
        assert list(cache.rglob("double/1/model.pt"))
    log = server.log()
    assert "2 of 2 file(s) downloaded" in log


def test_cache_is_kept_and_reused_across_restarts(
    s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    write_scaled(tmp_path / "local", "double", {1: 2.0})
    s3.upload_tree(tmp_path / "local", bucket, "models")
    cache = tmp_path / "cache"
    env = dict(os.environ, **CREDENTIALS)
    with start(s3.url(bucket, "models"), cache, env=env) as first:
        assert infer_scaled(first.http_url, "double") == 2.0
    assert "2 of 2 file(s) downloaded" in first.log()
    # The snapshot a process loaded from is gone with it; the mirror stays.
    assert not list(cache.rglob("snapshots/*/double-*"))
    with start(s3.url(bucket, "models"), cache, env=env) as second:
        assert infer_scaled(second.http_url, "double") == 2.0
    assert "0 of 2 file(s) downloaded" in second.log()


def test_without_a_cache_folder_a_temporary_one_is_removed_at_exit(
    s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    write_scaled(tmp_path / "local", "double", {1: 2.0})
    s3.upload_tree(tmp_path / "local", bucket, "models")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, **CREDENTIALS, TMPDIR=str(temp), OMP_NUM_THREADS="1")
    server = ServerProcess([], ["--model-repository", s3.url(bucket, "models")], env=env)
    server.env = env
    with server.start():
        assert infer_scaled(server.http_url, "double") == 2.0
        assert list(temp.glob("ptserve-repository-*"))
    assert not list(temp.glob("ptserve-repository-*"))


def test_poll_mode_follows_the_bucket(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    local = tmp_path / "local"
    write_scaled(local, "scaled", {1: 1.0})
    s3.upload_tree(local, bucket, "repo")
    env = dict(os.environ, **CREDENTIALS)
    with start(s3.url(bucket, "repo"), tmp_path / "cache", tuple(POLL), env) as server:
        assert infer_scaled(server.http_url, "scaled") == 1.0
        # A changed object (same key, new content) reloads the model.
        torch.jit.save(torch.jit.script(Scale(5.0)), str(local / "scaled/1/model.pt"))
        s3.client().upload_file(str(local / "scaled/1/model.pt"), bucket, "repo/scaled/1/model.pt")
        wait_until(lambda: infer_scaled(server.http_url, "scaled") == 5.0, what="the reload")
        # A new model folder loads; a removed one unloads.
        write_scaled(tmp_path / "more", "added", {1: 7.0})
        s3.upload_tree(tmp_path / "more", bucket, "repo")
        wait_until(lambda: server.status("/v2/models/added/ready") == 200, what="'added' loads")
        assert infer_scaled(server.http_url, "added") == 7.0
        s3.delete_prefix(bucket, "repo/added/")
        wait_until(lambda: server.status("/v2/models/added/ready") != 200, what="'added' goes")
        assert infer_scaled(server.http_url, "scaled") == 5.0
    log = server.log()
    assert "model 'scaled' changed in the repository: loading it" in log
    assert "model 'added' left the repository: unloading it" in log


def test_poll_mode_keeps_serving_while_the_store_is_unreachable(tmp_path: Path) -> None:
    store = S3Server()
    try:
        store.client().create_bucket(Bucket="flaky")
        write_scaled(tmp_path / "local", "scaled", {1: 3.0})
        store.upload_tree(tmp_path / "local", "flaky", "repo")
        env = dict(os.environ, **CREDENTIALS)
        with start(store.url("flaky", "repo"), tmp_path / "cache", tuple(POLL), env) as server:
            assert infer_scaled(server.http_url, "scaled") == 3.0
            store.stop()
            wait_until(lambda: "stay as they are until it can be read again" in server.log())
            # An unreachable store is not an empty one: the model is still served.
            assert infer_scaled(server.http_url, "scaled") == 3.0
            assert server.status("/v2/health/ready") == 200
    finally:
        store.stop()
    assert "cannot reach http://127.0.0.1" in server.log()


def test_explicit_mode_loads_from_the_bucket(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    write_scaled(tmp_path / "local", "triple", {1: 3.0})
    s3.upload_tree(tmp_path / "local", bucket, "explicit")
    args = ("--model-control-mode", "explicit")
    env = dict(os.environ, **CREDENTIALS)
    with start(s3.url(bucket, "explicit"), tmp_path / "cache", args, env) as server:
        index_request = urllib.request.Request(
            f"http://{server.http_url}/v2/repository/index", data=b"{}", method="POST"
        )
        with urllib.request.urlopen(index_request, timeout=10) as reply:
            assert {"name": "triple"} in json.loads(reply.read())
        load = urllib.request.Request(
            f"http://{server.http_url}/v2/repository/models/triple/load", data=b"", method="POST"
        )
        with urllib.request.urlopen(load, timeout=60) as reply:
            assert reply.status == 200
        assert infer_scaled(server.http_url, "triple") == 3.0


def test_a_single_model_folder_in_a_bucket(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    # What a KServe storage URI often points at: the model file and its config, no versions.
    folder = tmp_path / "single"
    folder.mkdir()
    (folder / "config.pbtxt").write_text(scaled_config())
    torch.jit.save(torch.jit.script(Scale(4.0)), str(folder / "model.pt"))
    s3.upload_tree(folder, bucket, "models/resnet")
    args = ("--model-name", "quad")
    env = dict(os.environ, **CREDENTIALS)
    with start(s3.url(bucket, "models/resnet"), tmp_path / "cache", args, env) as server:
        assert infer_scaled(server.http_url, "quad") == 4.0


def exits_with(url: str, tmp_path: Path, env: dict[str, str]) -> tuple[int, str]:
    server = start(url, tmp_path / "cache", env=env, wait=None)
    code = server.wait_exit(60)
    return code, server.log()


def test_a_missing_bucket_is_a_clear_error(s3: S3Server, tmp_path: Path) -> None:
    code, log = exits_with(
        s3.url("no-such-bucket", "models"), tmp_path, dict(os.environ, **CREDENTIALS)
    )
    assert code == 1
    assert "bucket 'no-such-bucket' at http://127.0.0.1" in log
    assert "does not exist" in log


def test_missing_credentials_are_a_clear_error(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    write_scaled(tmp_path / "local", "double", {1: 2.0})
    s3.upload_tree(tmp_path / "local", bucket, "models")
    code, log = exits_with(s3.url(bucket, "models"), tmp_path, no_credentials_env())
    assert code == 1
    assert "no usable AWS credentials" in log
    assert "AWS_ACCESS_KEY_ID" in log


def test_an_empty_prefix_is_a_clear_error(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    code, log = exits_with(s3.url(bucket, "typo"), tmp_path, dict(os.environ, **CREDENTIALS))
    assert code == 1
    assert f"no objects under s3://{bucket}/typo/ (is the path right?)" in log


def test_keys_that_would_leave_the_cache_are_refused(
    s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    write_scaled(tmp_path / "local", "double", {1: 2.0})
    s3.upload_tree(tmp_path / "local", bucket, "models")
    client = s3.client()
    client.put_object(Bucket=bucket, Key="models/double/../../../escaped.txt", Body=b"x")
    client.put_object(Bucket=bucket, Key="models/double//empty-part.txt", Body=b"x")
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert "models/double/../../../escaped.txt" in keys  # the store keeps such keys as they are
    cache = tmp_path / "cache"
    with start(s3.url(bucket, "models"), cache, env=dict(os.environ, **CREDENTIALS)) as server:
        assert infer_scaled(server.http_url, "double") == 2.0
    assert "ignoring the object 'double/../../../escaped.txt'" in server.log()
    assert "ignoring the object 'double//empty-part.txt'" in server.log()
    assert not list(tmp_path.rglob("escaped.txt"))
    assert not list(tmp_path.rglob("empty-part.txt"))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://", "no bucket name"),
        ("s3://Bad_Bucket/models", "'Bad_Bucket' is not a valid bucket name"),
        ("s3://bucket/a/../b", "may not contain '.', '..'"),
        ("s3://host:port:9/bucket", "neither a bucket name nor host:port"),
        ("ftp://host/models", "unsupported scheme 'ftp://'"),
    ],
)
def test_malformed_urls_are_refused_on_the_command_line(url: str, message: str) -> None:
    server = ServerProcess([], ["--model-repository", url]).start(wait=None)
    assert server.wait_exit(60) == 2
    assert message in server.log()


@pytest.mark.parametrize(
    ("url", "endpoint", "bucket", "prefix"),
    [
        ("s3://bucket/path/to/repo", "", "bucket", "path/to/repo/"),
        ("s3://bucket", "", "bucket", ""),
        ("s3://bucket/", "", "bucket", ""),
        ("s3://minio.local:9000/bucket/models", "http://minio.local:9000", "bucket", "models/"),
        ("s3://https://s3.example.com:443/b-1/m", "https://s3.example.com:443", "b-1", "m/"),
        ("s3://http://[::1]:9000/bucket/x//y/", "http://[::1]:9000", "bucket", "x/y/"),
    ],
)
def test_url_forms(url: str, endpoint: str, bucket: str, prefix: str) -> None:
    where = parse_location(url)
    assert (where.endpoint, where.bucket, where.prefix) == (endpoint, bucket, prefix)


def test_local_repositories_still_work_beside_remote_ones(
    s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    write_scaled(tmp_path / "remote", "from_s3", {1: 2.0})
    s3.upload_tree(tmp_path / "remote", bucket, "models")
    local = tmp_path / "local"
    write_scaled(local, "from_disk", {1: 3.0})
    args = ("--model-repository", str(local))
    with start(
        s3.url(bucket, "models"), tmp_path / "cache", args, dict(os.environ, **CREDENTIALS)
    ) as server:
        assert infer_scaled(server.http_url, "from_s3") == 2.0
        assert infer_scaled(server.http_url, "from_disk") == 3.0
    shutil.rmtree(tmp_path / "cache")
