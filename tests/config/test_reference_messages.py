"""Configuration errors carry the reference server's own sentence first, then the specifics.

Each case is a small config with one problem, checked through the same steps the server takes
when it reads a model (``ModelManager.read_config``); two cases go through the real process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ptserve.backends.base import Backend, BackendModel, LoadContext
from ptserve.common.errors import ServerError, Status
from ptserve.config.parse import ModelConfig
from ptserve.core.manager import LoadOptions, ModelManager
from ptserve.core.server import default_backends
from tests.serverproc import ServerProcess

IO = """
    input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
    output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""
BATCHING = 'platform: "pytorch_libtorch"\nmax_batch_size: 8\n' + IO


def _io(kind: str, dims: str, reshape: str | None = None, batch: int = 4) -> str:
    """A config whose ``kind`` ("input" or "output") has ``dims`` and maybe a reshape."""
    other = "output" if kind == "input" else "input"
    shaped = f'name: "{kind}" data_type: TYPE_FP32 dims: [ {dims} ]'
    if reshape is not None:
        shaped += f" reshape {{ shape: [ {reshape} ] }}"
    plain = f'name: "{other}" data_type: TYPE_FP32 dims: [ 1 ]'
    first, second = (shaped, plain) if kind == "input" else (plain, shaped)
    return (
        f'platform: "pytorch_libtorch"\nmax_batch_size: {batch}\n'
        f"input [ {{ {first} }} ]\noutput [ {{ {second} }} ]\n"
    )


def _control(controls: str) -> str:
    return BATCHING + f"sequence_batching {{ control_input [ {controls} ] }}"


def _flag(name: str, kind: str, values: str = "int32_false_true: [ 0, 1 ]") -> str:
    return f'{{ name: "{name}" control [ {{ kind: CONTROL_SEQUENCE_{kind} {values} }} ] }}'


def _batch_input(kind: str, sources: str) -> str:
    source = f"source_input: [ {sources} ]" if sources else ""
    return (
        BATCHING
        + f'batch_input [ {{ kind: {kind} target_name: "BATCH" data_type: TYPE_FP32 {source} }} ]'
    )


def _batch_output(targets: str, sources: str) -> str:
    source = f"source_input: [ {sources} ]" if sources else ""
    return (
        BATCHING + f"batch_output [ {{ target_name: [ {targets} ] "
        f"kind: BATCH_SCATTER_WITH_INPUT_SHAPE {source} }} ]"
    )


_SIZE = "has different size for dims and reshape for m"
_VARIABLE = "has different number of variable-size dimensions for dims and reshape for m"
_DIM = "dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m"
_RESHAPE_DIM = (
    "reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension for m"
)
_EMPTY = (
    "cannot have empty reshape for non-batching model as scalar tensors are not supported for m"
)
_READY_VALUES = (
    "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
    "'bool_false_true' for CONTROL_SEQUENCE_READY for m"
)
_DELAY = "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m"
_DELAY_POLICY = "{ timeout_action: DELAY default_timeout_microseconds: 1000 }"

CASES = {
    # inputs and outputs
    "reshape_elementcount_input": (
        _io("input", "1, 3, 2", "5"),
        f"model input 'input' {_SIZE}: reshape [5] has 5 elements, but dims [1, 3, 2] has 6",
    ),
    "reshape_elementcount_output": (
        _io("output", "15", "3, 2, 5"),
        f"model output 'output' {_SIZE}: reshape [3, 2, 5] has 30 elements",
    ),
    "reshape_fixed_to_variable": (_io("input", "2, -1", "2, 2"), f"model input 'input' {_SIZE}"),
    "reshape_variable_runs": (
        _io("output", "2, -1", "1, -1, 2", batch=0),
        f"model output 'output' {_SIZE}",
    ),
    "reshape_variable_count": (
        _io("input", "2, -1", "2, -1, -1"),
        f"model input 'input' {_VARIABLE}",
    ),
    "reshape_zero": (_io("output", "1", "0", batch=0), f"model output 'output' {_RESHAPE_DIM}"),
    "reshape_empty_nobatch": (_io("input", "1", "", batch=0), f"model input 'input' {_EMPTY}"),
    "zero_dims": (_io("input", "1, 0, 28"), f"model input 'input' {_DIM}: dims [1, 0, 28] has 0"),
    "zero_dims_output": (_io("output", "0"), f"model output 'output' {_DIM}"),
    "missing_datatype": (
        BATCHING.replace(
            "TYPE_INT32 dims: [ -1 ] } ]\n    output", "TYPE_INVALID dims: [1] } ]\n    output"
        ),
        "model input 'INPUT' must specify 'data_type' for m",
    ),
    "no_outputs": (
        'platform: "pytorch_libtorch"\ninput [ { name: "I" data_type: TYPE_FP32 dims: [1] } ]',
        "model configuration must contain at least one output, none were specified",
    ),
    # model-level fields and the batchers
    "negative_max_batch_size": (
        BATCHING.replace("max_batch_size: 8", "max_batch_size: -2"),
        "'max_batch_size' must be non-negative value for m: got -2",
    ),
    "default_priority_level": (
        BATCHING + "dynamic_batching { priority_levels: 3 default_priority_level: 5 }",
        "default priority level must be in range [1, 3] for m",
    ),
    "priority_queue_policy_level": (
        BATCHING + "dynamic_batching { priority_levels: 3 default_priority_level: 1 "
        "priority_queue_policy { key: 4 value: { } } }",
        "priority queue policy must have priority level in range [1, 3] for m",
    ),
    "preserve_ordering_levels": (
        BATCHING + "dynamic_batching { preserve_ordering: true priority_levels: 3 "
        "default_priority_level: 2 }",
        "Only one priority level is allowed when 'preserve_ordering' is true for m",
    ),
    "preserve_ordering_default_delay": (
        BATCHING
        + f"dynamic_batching {{ preserve_ordering: true default_queue_policy {_DELAY_POLICY} }}",
        _DELAY,
    ),
    "preserve_ordering_level_delay": (
        BATCHING + "dynamic_batching { preserve_ordering: true priority_levels: 1 "
        f"default_priority_level: 1 priority_queue_policy {{ key: 1 value: {_DELAY_POLICY} }} }}",
        _DELAY,
    ),
    "preferred_size": (
        BATCHING + "dynamic_batching { preferred_batch_size: [ 16 ] }",
        "dynamic batching preferred size must be <= max batch size for m",
    ),
    "control_start_twice": (
        _control(_flag("S1", "START") + ", " + _flag("S2", "START")),
        "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for m",
    ),
    "control_end_twice": (
        _control(_flag("E1", "END") + ", " + _flag("E2", "END")),
        "sequence batching specifies multiple CONTROL_SEQUENCE_END tensors for m",
    ),
    "control_ready_twice": (
        _control(_flag("R1", "READY") + ", " + _flag("R2", "READY")),
        "sequence batching specifies multiple CONTROL_SEQUENCE_READY tensors for m",
    ),
    "control_tensor_twice": (
        _control(_flag("START", "START") + ", " + _flag("START", "READY")),
        "sequence batching control tensor 'START' is specified for multiple control kinds for m",
    ),
    "control_no_value": (_control(_flag("READY", "READY", "")), _READY_VALUES),
    "control_three_values": (
        _control(_flag("S", "START", "int32_false_true: [ 0, 1, 2 ]")),
        "sequence batching control 'int32_false_true' must have exactly 2 entries for "
        "CONTROL_SEQUENCE_START for m",
    ),
    "corrid_type": (
        _control(_flag("C", "CORRID", "data_type: TYPE_FP32")),
        "unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed data types are "
        "TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
    ),
    "ensemble_scheduling": (
        BATCHING + 'ensemble_scheduling { step [ { model_name: "a" model_version: -1 } ] }',
        "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble",
    ),
    # instance groups
    "cpu_with_gpus": (
        BATCHING + "instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]",
        "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs",
    ),
    "named_group": (
        BATCHING + 'instance_group [ { kind: KIND_CPU } ] instance_group [ { name: "g" '
        "kind: KIND_MODEL gpus: [ 0 ] } ]",
        "instance group g of model m has kind KIND_MODEL but specifies one or more GPUs",
    ),
    "absent_gpu": (
        BATCHING + "instance_group [ { kind: KIND_GPU gpus: [ 42 ] } ]",
        "instance group m_0 of model m specifies invalid or unsupported gpu id 42. GPUs with at "
        "least the minimum required CUDA compute compatibility",
    ),
    # batch inputs and outputs
    "batch_input_no_source": (
        _batch_input("BATCH_ELEMENT_COUNT", ""),
        "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 0 for m",
    ),
    "batch_input_two_sources": (
        _batch_input("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", '"INPUT", "INPUT"'),
        "batch input kind 'BATCH_MAX_ELEMENT_COUNT_AS_SHAPE' expects 1 source input, got 2",
    ),
    "batch_input_unknown_source": (
        _batch_input("BATCH_ACCUMULATED_ELEMENT_COUNT", '"UNKNOWN_INPUT"'),
        "unknown source input name 'UNKNOWN_INPUT' for m",
    ),
    "batch_output_no_source": (
        _batch_output('"OUTPUT"', ""),
        "batch output kind 'BATCH_SCATTER_WITH_INPUT_SHAPE' expects 1 source input, got 0",
    ),
    "batch_output_two_sources": (
        _batch_output('"OUTPUT"', '"INPUT", "INPUT"'),
        "batch output kind 'BATCH_SCATTER_WITH_INPUT_SHAPE' expects 1 source input, got 2",
    ),
    "batch_output_unknown_source": (
        _batch_output('"OUTPUT"', '"UNKNOWN_INPUT"'),
        "unknown source input name 'UNKNOWN_INPUT' for m",
    ),
    "batch_output_unknown_target": (
        _batch_output('"UNKNOWN_OUTPUT"', '"INPUT"'),
        "unknown target output name 'UNKNOWN_OUTPUT' for m",
    ),
    "batch_output_target_twice": (
        _batch_output('"OUTPUT", "OUTPUT"', '"INPUT"'),
        "target output name 'OUTPUT' can only be specified once for m",
    ),
    # platform, backend and runtime
    "platform_backend_pair": (
        BATCHING.replace('"pytorch_libtorch"', '"onnxruntim"') + 'backend: "onnxruntime"',
        "unexpected 'platform' and 'backend' pair, got:onnxruntim, onnxruntime",
    ),
    "platform_from_file_name": (
        BATCHING.replace('"pytorch_libtorch"', '"onnxruntim"')
        + 'default_model_filename: "model.onnx"',
        "unexpected 'platform' and 'backend' pair, got:onnxruntim, onnxruntime",
    ),
    "unknown_runtime": (
        BATCHING + 'runtime: "__invalid_runtime__"',
        "unable to find backend library '__invalid_runtime__' for model 'm'",
    ),
    "runtime_escape": (
        BATCHING + 'runtime: "../elsewhere/libtriton_identity.so"',
        "backend library name '../elsewhere/libtriton_identity.so' escapes backend directory",
    ),
}


class _NoGPU(Backend):
    """The PyTorch backend as a host without GPUs sees it, whatever this host has."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name

    def claims(self, config: ModelConfig, model_dir: Path) -> bool:
        return self.inner.claims(config, model_dir)

    def complete_config(self, config: ModelConfig, model_dir: Path) -> None:
        self.inner.complete_config(config, model_dir)

    def gpu_count(self) -> int:
        return 0

    def load(self, context: LoadContext) -> BackendModel:
        return self.inner.load(context)


@pytest.fixture(scope="module")
def backends() -> list[Backend]:
    return [_NoGPU(backend) for backend in default_backends()]


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "autocomplete"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_reference_sentence_comes_first(
    case: str, strict: bool, backends: list[Backend], tmp_path: Path
) -> None:
    text, message = CASES[case]
    model_dir = tmp_path / "m"  # no version folder: the config is judged on its own
    model_dir.mkdir()
    (model_dir / "config.pbtxt").write_text(text)
    manager = ModelManager(backends, LoadOptions(strict_model_config=strict))
    with pytest.raises(ServerError) as info:
        manager.load("m", model_dir)
    assert info.value.status is Status.INVALID_ARGUMENT
    assert info.value.message.startswith(message), info.value.message


def test_valid_config_without_versions_reports_the_versions(
    backends: list[Backend], tmp_path: Path
) -> None:
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / "config.pbtxt").write_text(BATCHING)
    manager = ModelManager(backends, LoadOptions(strict_model_config=True))
    with pytest.raises(ServerError, match="no version folder"):
        manager.load("m", model_dir)


def _repository(root: Path, config: str) -> Path:
    repository = root / "repo"
    (repository / "bad").mkdir(parents=True)  # no version folder
    (repository / "bad" / "config.pbtxt").write_text(config)
    return repository


def test_server_reports_the_config_error_of_a_model_without_versions(tmp_path: Path) -> None:
    config = _io("input", "1, 3, 2", "5").replace("platform", 'name: "bad"\nplatform', 1)
    server = ServerProcess([_repository(tmp_path, config)], ["--disable-auto-complete-config"])
    assert server.start(wait=None).wait_exit() == 1
    log = server.log()
    line = next(x for x in log.splitlines() if "failed to load 'bad'" in x)
    assert line.startswith("E"), line
    assert "model input 'input' has different size for dims and reshape for bad" in line
    assert "no version folder" not in log


@pytest.mark.parametrize(
    ("args", "warnings"),
    [
        (
            ["--strict-model-config=true"],
            [
                "Warning: '--strict-model-config' has been deprecated! Please use "
                "'--disable-auto-complete-config' instead."
            ],
        ),
        (
            ["--disable-auto-complete-config", "--strict-model-config=false"],
            [
                "Warning: '--strict-model-config' has been deprecated! Please use "
                "'--disable-auto-complete-config' instead.",
                "Warning: Overriding deprecated '--strict-model-config' from False to True in "
                "favor of '--disable-auto-complete-config'!",
            ],
        ),
        (["--disable-auto-complete-config"], []),
    ],
    ids=["deprecated", "override", "new-flag"],
)
def test_strict_model_config_warnings(tmp_path: Path, args: list[str], warnings: list[str]) -> None:
    server = ServerProcess([_repository(tmp_path, BATCHING)], args)
    assert server.start(wait=None).wait_exit() == 1
    log = server.log()
    for warning in warnings:
        assert warning in log, log
    if not warnings:
        assert "deprecated" not in log, log
    assert "failed to load 'bad'" in log  # the strict (no auto-complete) load still ran
