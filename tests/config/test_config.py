"""Parsing, auto-completing, validating and rendering model configurations."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptserve.common.errors import ServerError, Status
from ptserve.config.autocomplete import auto_complete
from ptserve.config.parse import ModelConfig, load_config, parse_config
from ptserve.config.render import config_to_dict
from ptserve.config.validate import instance_group_labels, validate_config
from ptserve.repository import select_versions

BASE = """
    max_batch_size: 8
    input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def completed(text: str, name: str = "m", gpus: int = 0) -> ModelConfig:
    config = parse_config(text, f"model '{name}'")
    auto_complete(config, name, gpus)
    return config


def test_every_triton_field_parses() -> None:
    config = parse_config(
        BASE
        + """
        dynamic_batching { preferred_batch_size: [2, 4] max_queue_delay_microseconds: 100 }
        instance_group [ { count: 2 kind: KIND_CPU } ]
        parameters { key: "INFERENCE_MODE" value: { string_value: "false" } }
        model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value: {
            data_type: TYPE_FP32 dims: [4] zero_data: true } } } ]
        response_cache { enable: false }
        """,
        "model 'm'",
    )
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    assert config.parameters["INFERENCE_MODE"].string_value == "false"


def test_parse_error_names_model_and_field() -> None:
    with pytest.raises(ServerError) as info:
        parse_config("max_batch_sise: 4", "model 'typo'")
    assert info.value.status is Status.INVALID_ARGUMENT
    assert "model 'typo'" in info.value.message
    assert "max_batch_sise" in info.value.message


def test_auto_complete_defaults() -> None:
    config = completed(BASE + "dynamic_batching { }")
    assert config.name == "m"
    assert config.version_policy.latest.num_versions == 1
    assert len(config.instance_group) == 1
    group = config.instance_group[0]
    assert (group.name, group.count, group.kind) == ("m", 1, 2)  # KIND_CPU without GPUs
    assert list(config.dynamic_batching.preferred_batch_size) == [8]


def test_auto_kind_picks_gpu_when_present() -> None:
    config = completed(BASE, gpus=2)
    assert config.instance_group[0].kind == 1
    assert list(config.instance_group[0].gpus) == [0, 1]


def test_name_must_match_folder() -> None:
    with pytest.raises(ServerError, match="the config names the model 'other'"):
        completed('name: "other"' + BASE, name="m")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_batch_size: 1", "must contain at least one output, none were specified"),
        (
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            "model configuration must contain at least one output, none were specified",
        ),
        (
            BASE.replace("dims: [ 4 ] } ]\n    output", "dims: [ 0 ] } ]\n    output"),
            "model input 'IN' dimension must be integer >= 1, or -1 to indicate a variable-size "
            "dimension for m: dims [0] has 0",
        ),
        (
            BASE.replace("max_batch_size: 8", "max_batch_size: 0").replace(
                "dims: [ 4 ]", "dims: []"
            ),
            "model input 'IN' must specify 'dims' for m",
        ),
        (
            BASE.replace(
                "data_type: TYPE_FP32 dims: [ 4 ] } ]\n    output",
                "data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 3 ] } } ]\n    output",
            ),
            "model input 'IN' has different size for dims and reshape for m: reshape [3] has 3 "
            "elements, but dims [4] has 4",
        ),
        (
            BASE + "dynamic_batching { preferred_batch_size: [ 16 ] }",
            "dynamic batching preferred size must be <= max batch size for m: "
            "dynamic_batching.preferred_batch_size 16 must be between 1 and max_batch_size 8",
        ),
        (
            BASE.replace("max_batch_size: 8", "max_batch_size: 0") + "dynamic_batching { }",
            "dynamic_batching requires max_batch_size > 0",
        ),
        (
            BASE + 'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]',
            "output name 'OUT' appears more than once",
        ),
        (
            BASE.replace(
                "TYPE_FP32 dims: [ 4 ] } ]\n    output", "TYPE_INVALID dims: [ 4 ] } ]\n  output"
            ),
            "model input 'IN' must specify 'data_type' for m",
        ),
        (
            BASE + "instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]",
            "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs: "
            "gpus [0] are only for KIND_GPU",
        ),
    ],
)
def test_validation_errors(text: str, message: str) -> None:
    config = parse_config(text, "model 'm'")
    labels = instance_group_labels(config, "m")
    auto_complete(config, "m", 0)
    with pytest.raises(ServerError) as info:
        validate_config(config, group_labels=labels)
    assert message in info.value.message
    assert info.value.status is Status.INVALID_ARGUMENT


def test_render_matches_triton_json() -> None:
    config = completed(BASE + "dynamic_batching { max_queue_delay_microseconds: 500 }")
    rendered = config_to_dict(config)
    assert rendered["max_batch_size"] == 8
    assert rendered["input"][0]["dims"] == [4]
    assert rendered["input"][0]["data_type"] == "TYPE_FP32"
    assert rendered["dynamic_batching"]["max_queue_delay_microseconds"] == 500  # a number
    assert rendered["dynamic_batching"]["preferred_batch_size"] == [8]
    assert "sequence_batching" not in rendered  # unset sub-messages are left out
    assert "ensemble_scheduling" not in rendered  # unset oneofs too
    assert rendered["platform"] == ""  # primitive fields always printed
    assert rendered["version_policy"] == {"latest": {"num_versions": 1}}
    assert rendered["parameters"] == {}
    assert rendered["instance_group"][0]["kind"] == "KIND_CPU"


def test_load_config_prefers_custom_name(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "config.pbtxt").write_text(BASE)
    (tmp_path / "configs" / "big.pbtxt").write_text(BASE.replace("8", "64"))
    assert load_config(tmp_path, "big").max_batch_size == 64
    assert load_config(tmp_path, "absent").max_batch_size == 8
    assert load_config(tmp_path).max_batch_size == 8


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("", [3]),
        ("version_policy: { latest: { num_versions: 2 } }", [2, 3]),
        ("version_policy: { all: {} }", [1, 2, 3]),
        ("version_policy: { specific: { versions: [ 1, 5 ] } }", [1]),
    ],
)
def test_select_versions(policy: str, expected: list[int]) -> None:
    assert select_versions(completed(BASE + policy), [1, 2, 3]) == expected


def test_sequence_batching_defaults() -> None:
    config = completed(BASE + "sequence_batching { }")
    rendered = config_to_dict(config)["sequence_batching"]
    assert rendered["max_sequence_idle_microseconds"] == 1_000_000
    assert "direct" in rendered and "oldest" not in rendered
    kept = completed(BASE + "sequence_batching { max_sequence_idle_microseconds: 5 oldest { } }")
    assert kept.sequence_batching.max_sequence_idle_microseconds == 5
    assert kept.sequence_batching.WhichOneof("strategy_choice") == "oldest"
