"""The ptserve process: startup, load failures, flags and clean shutdown."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient

from ptserve.cli import main
from ptserve.examples import SIMPLE_CONFIG, AddSub, write_model
from tests.frontends.http.rawhttp import error_of, request
from tests.serverproc import ServerProcess


def good_and_bad(root: Path) -> Path:
    repository = root / "repo"
    write_model(repository, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    bad = repository / "broken"
    (bad / "1").mkdir(parents=True)
    (bad / "1" / "model.pt").write_bytes(b"this is not a torchscript file")
    (bad / "config.pbtxt").write_text(
        'platform: "pytorch_libtorch"\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    return repository


def test_failed_model_stops_startup_by_default(tmp_path: Path) -> None:
    server = ServerProcess([good_and_bad(tmp_path)]).start(wait=None)
    assert server.wait_exit() == 1
    log = server.log()
    assert "failed to load 'broken'" in log
    assert "failed to load" in log and "as TorchScript" in log


def test_failed_model_does_not_stop_the_others(tmp_path: Path) -> None:
    server = ServerProcess([good_and_bad(tmp_path)], ["--exit-on-error=false"]).start(wait="live")
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_server_live()
        assert not client.is_server_ready()  # strict readiness: one model is not ready
        assert client.is_model_ready("simple")
        assert not client.is_model_ready("broken")
        status, _, body = request(server.http_url, "GET", "/v2/models/broken")
        assert status == 503
        assert "as TorchScript" in error_of(body)
        a = np.ones((1, 16), np.int32)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "INT32"),
            httpclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), a * 2)
        assert "| broken" in server.log() and "UNAVAILABLE" in server.log()
    finally:
        assert server.stop() == 0


def test_relaxed_readiness(tmp_path: Path) -> None:
    args = ["--exit-on-error=false", "--strict-readiness=false"]
    with ServerProcess([good_and_bad(tmp_path)], args).start(wait="ready") as server:
        assert request(server.http_url, "GET", "/v2/health/ready")[0] == 200


def test_sigterm_and_sigint_exit_cleanly(example_repository: Path) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        server = ServerProcess([example_repository]).start()
        assert server.stop(sig) == 0
        assert "stopped" in server.log()


def test_config_errors_name_model_and_field(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    write_model(repository, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    bad = repository / "typo"
    (bad / "1").mkdir(parents=True)
    (bad / "config.pbtxt").write_text('platform: "pytorch_libtorch"\nmax_batch_sise: 4\n')
    empty = repository / "noinputs"
    (empty / "1").mkdir(parents=True)
    (empty / "config.pbtxt").write_text('platform: "pytorch_libtorch"\n')
    server = ServerProcess([repository]).start(wait=None)
    assert server.wait_exit() == 1
    log = server.log()
    assert "failed to parse the model configuration of model 'typo'" in log
    assert "max_batch_sise" in log
    assert "model configuration must contain at least one output, none were specified" in log


def test_model_config_name_and_strict_config(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    model_dir = write_model(repository, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    (model_dir / "configs").mkdir()
    custom = SIMPLE_CONFIG.replace("max_batch_size: 8", "max_batch_size: 2")
    (model_dir / "configs" / "small.pbtxt").write_text(custom)
    with ServerProcess([repository], ["--model-config-name", "small"]) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.get_model_config("simple")["max_batch_size"] == 2
    shutil.rmtree(model_dir / "configs")
    (model_dir / "config.pbtxt").unlink()
    server = ServerProcess([repository], ["--strict-model-config=true"]).start(wait=None)
    assert server.wait_exit() == 1
    assert "no configuration file" in server.log()


def test_bare_model_pt_is_taken_as_pytorch(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    config = SIMPLE_CONFIG.replace('platform: "pytorch_libtorch"', "")
    write_model(repository, "simple", config, {1: torch.jit.script(AddSub())})
    with ServerProcess([repository]) as server:
        config_json = httpclient.InferenceServerClient(server.http_url).get_model_config("simple")
        assert config_json["platform"] == "pytorch_libtorch"
        assert config_json["backend"] == "pytorch"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("", ["3"]),
        ("version_policy: { latest: { num_versions: 2 } }", ["2", "3"]),
        ("version_policy: { specific: { versions: [1, 3] } }", ["1", "3"]),
        ("version_policy: { all: {} }", ["1", "2", "3"]),
    ],
)
def test_version_policies(tmp_path: Path, policy: str, expected: list[str]) -> None:
    repository = tmp_path / "repo"
    config = SIMPLE_CONFIG + "\n" + policy
    modules = {v: torch.jit.script(AddSub()) for v in (1, 2, 3)}
    write_model(repository, "simple", config, modules)
    with ServerProcess([repository]) as server:
        metadata = httpclient.InferenceServerClient(server.http_url).get_model_metadata("simple")
        assert metadata["versions"] == expected


def test_several_repositories_and_duplicates(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    write_model(first, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    write_model(second, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    other = SIMPLE_CONFIG.replace('name: "simple"', 'name: "other"')
    write_model(second, "other", other, {1: torch.jit.script(AddSub())})
    server = ServerProcess([first, second], ["--exit-on-error=false"]).start(wait="live")
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_model_ready("other")
        assert "model 'simple' appears in several repositories" in server.log()
    finally:
        server.stop()


def test_http_connection_flags() -> None:
    from ptserve.cli import build_parser

    parser = build_parser()
    repository = ["--model-repository", "/nowhere"]
    defaults = parser.parse_args(repository)
    assert (defaults.http_idle_timeout_secs, defaults.http_max_connections) == (75.0, 1024)
    args = parser.parse_args(
        [*repository, "--http-idle-timeout-secs", "0", "--http-max-connections", "0"]
    )
    assert (args.http_idle_timeout_secs, args.http_max_connections) == (0.0, 0)
    for flag, value in [
        ("--http-idle-timeout-secs", "-1"),
        ("--http-max-connections", "-1"),
        ("--http-max-connections", "1.5"),
    ]:
        with pytest.raises(SystemExit):
            parser.parse_args([*repository, flag, value])


def test_trace_config_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from ptserve.cli import build_parser

    parser = build_parser()
    repository = ["--model-repository", "/nowhere"]
    args = parser.parse_args(
        [
            *repository,
            *("--trace-config", "mode=opentelemetry", "--trace-config", "triton,rate=10"),
            *("--trace-config", "opentelemetry,url=https://collector:4318/v1/traces"),
            *("--trace-config", "opentelemetry,resource=team=ml"),
            *("--log-format", "json"),
        ]
    )
    assert args.trace_config == [
        ("trace_mode", "opentelemetry"),
        ("trace_rate", "10"),
        ("opentelemetry.url", "https://collector:4318/v1/traces"),
        ("opentelemetry.resource", "team=ml"),
    ]
    assert args.log_format == "json"
    # Each mistake is named with the setting, what it expects and what came.
    for value, message in [
        ("rate=abc", "trace setting 'trace_rate' must be an integer, got 'abc'"),
        ("opentelemetry,url=http://collector:port/v1", "got 'http://collector:port/v1'"),
        ("opentelemetry,bsp_schedule_delay=0", "must be a positive integer, got '0'"),
        ("opentelemetry,bsp_max_export_batch_size=x", "'bsp_max_export_batch_size' must be"),
        ("colour=red", "with key one of count, file, level"),
    ]:
        with pytest.raises(SystemExit):
            parser.parse_args([*repository, "--trace-config", value])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args([*repository, "--log-format", "yaml"])
    assert "'default', 'ISO8601', 'json'" in capsys.readouterr().err


def test_model_load_thread_count(capsys: pytest.CaptureFixture[str]) -> None:
    from ptserve.cli import build_parser, options_from_args

    parser = build_parser()
    repository = ["--model-repository", "/nowhere"]
    assert options_from_args(parser.parse_args(repository)).load_threads == 4  # as the original
    args = parser.parse_args([*repository, "--model-load-thread-count", "1"])
    assert options_from_args(args).load_threads == 1
    for value in ("0", "-2", "two"):
        with pytest.raises(SystemExit):
            parser.parse_args([*repository, "--model-load-thread-count", value])
        error = capsys.readouterr().err
        assert (
            f"--model-load-thread-count: expected a whole number of at least 1, got '{value}'"
            in error
        )


@pytest.mark.parametrize("value", ["-1", "10001", "soon"])
def test_idle_poll_out_of_range_is_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--model-repository", "/nonexistent", "--idle-poll-us", value])
    assert exited.value.code == 2
    assert "--idle-poll-us" in capsys.readouterr().err
