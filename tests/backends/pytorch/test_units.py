"""Pure logic of the backend: parameter parsing, binding, output mapping, execution scope."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import numpy as np
import pytest
import torch

from ptserve.backends.pytorch.binding import Argument, bind_inputs, bind_outputs
from ptserve.backends.pytorch.execution import ThreadPools
from ptserve.backends.pytorch.outputs import OutputPlan, flatten
from ptserve.backends.pytorch.settings import Settings
from ptserve.common.errors import ServerError
from ptserve.common.prepared import PreparedRequest
from ptserve.config import parameters as params
from ptserve.config.io import model_io
from ptserve.config.parse import parse_config


def _config(parameters: dict[str, str]) -> str:
    text = 'name: "m" platform: "pytorch_libtorch" '
    for key, value in parameters.items():
        text += f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }} '
    return text


def settings(**parameters: str) -> Settings:
    return Settings.from_config(parse_config(_config(parameters), "m"))


def scope(s: Settings) -> contextlib.AbstractContextManager[Any]:
    """One execution's scope, made as a runner makes it."""
    return s.scope_factory()()


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("TRUE", True), ("On", True), ("1", True), ("false", False),
     ("OFF", False), ("0", False), (" False ", False)],
)  # fmt: skip
def test_booleans_in_any_case(text: str, value: bool) -> None:
    assert params.parse_bool(text) is value
    assert settings(INFERENCE_MODE=text).inference_mode is value


@pytest.mark.parametrize("key", ["INFERENCE_MODE", "DISABLE_CUDNN", "ENABLE_JIT_EXECUTOR"])
def test_bad_boolean_fails_with_the_original_message(key: str) -> None:
    with pytest.raises(ServerError, match=f"parameter {key}: failed to convert 'yes' to boolean"):
        settings(**{key: "yes"})


def test_integers_and_bad_integers() -> None:
    assert settings(INTRA_OP_THREAD_COUNT="3").intra_op_threads == 3
    assert settings(NUM_INTEROP_THREADS="2").inter_op_threads == 2
    with pytest.raises(ServerError, match="failed to convert 'two' to integral number"):
        settings(INTER_OP_THREAD_COUNT="two")
    with pytest.raises(ServerError, match="must be at least 1"):
        settings(NUM_THREADS="0")
    with pytest.raises(ServerError, match="size the same thread pool"):
        settings(INTRA_OP_THREAD_COUNT="2", NUM_THREADS="3")


def test_defaults_match_the_original() -> None:
    s = settings()
    assert s.inference_mode and not s.disable_optimized_execution and not s.disable_cudnn
    assert not s.weight_sharing and not s.cache_cleaning
    assert s.jit_executor is None and s.jit_profiling is None and s.tensor_fuser is None
    assert s.compile_options == {} and s.method == "forward"


def test_compile_options() -> None:
    text = '{\\"backend\\": \\"eager\\", \\"fullgraph\\": true}'
    assert settings(TORCH_COMPILE_OPTIONAL_PARAMETERS=text).compile_options == {
        "backend": "eager",
        "fullgraph": True,
    }
    with pytest.raises(ServerError, match="is not valid JSON"):
        settings(TORCH_COMPILE_OPTIONAL_PARAMETERS="{backend: eager}")
    with pytest.raises(ServerError, match="must not contain 'model'"):
        settings(TORCH_COMPILE_OPTIONAL_PARAMETERS='{\\"model\\": 1}')
    with pytest.raises(ServerError, match=r"unknown key\(s\) colour"):
        settings(TORCH_COMPILE_OPTIONAL_PARAMETERS='{\\"colour\\": 1}')
    with pytest.raises(ServerError, match="must be a JSON object"):
        settings(TORCH_COMPILE_OPTIONAL_PARAMETERS="[1]")


def test_log_lines_keep_the_original_wording(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="ptserve"):
        settings(INFERENCE_MODE="false", ENABLE_TENSOR_FUSER="0").log_settings("m")
    assert "Inference Mode is disabled for model instance 'm'" in caplog.text
    assert "Optimized execution is enabled for model instance 'm'" in caplog.text
    assert "Tensor fuser is disabled for model instance 'm'" in caplog.text
    assert "cuDNN is enabled for model instance 'm'" in caplog.text


def test_execution_scope_switches_and_restores_process_settings() -> None:
    s = settings(
        DISABLE_OPTIMIZED_EXECUTION="true",
        DISABLE_CUDNN="true",
        ENABLE_JIT_EXECUTOR="false",
        ENABLE_JIT_PROFILING="false",
        ENABLE_TENSOR_FUSER="false",
        INFERENCE_MODE="false",
    )
    before = (
        torch._C._get_graph_executor_optimize(),
        torch.backends.cudnn.enabled,
        torch._C._jit_texpr_fuser_enabled(),
    )
    with scope(s):
        assert torch._C._get_graph_executor_optimize() is False
        assert torch.backends.cudnn.enabled is False
        assert torch._C._jit_texpr_fuser_enabled() is False
        assert torch._C._jit_set_profiling_executor(False) is False
        assert torch._C._jit_set_profiling_mode(False) is False
        assert not torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    after = (
        torch._C._get_graph_executor_optimize(),
        torch.backends.cudnn.enabled,
        torch._C._jit_texpr_fuser_enabled(),
    )
    assert after == before
    with scope(settings()):
        assert torch.is_inference_mode_enabled()


def test_grad_mode_scopes_without_other_switches_restore_the_previous_mode() -> None:
    """The common case enters torch's guards directly: inference mode, or grad off."""
    inference, no_grad = settings(), settings(INFERENCE_MODE="false")
    assert not inference.switches_modes and not no_grad.switches_modes
    with torch.enable_grad():
        with scope(inference):
            assert torch.is_inference_mode_enabled() and not torch.is_grad_enabled()
        assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        with scope(no_grad):
            assert not torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
            assert torch.ones(1, requires_grad=True).mul(2).grad_fn is None
        assert torch.is_grad_enabled()
        with pytest.raises(RuntimeError), scope(no_grad):
            raise RuntimeError("the model failed")
        assert torch.is_grad_enabled()  # restored on the way out of a failure too
    with torch.no_grad(), scope(no_grad):
        pass
    assert torch.is_grad_enabled()


def test_thread_pool_first_model_wins_and_later_ones_are_warned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pools = ThreadPools()
    original = torch.get_num_threads()
    try:
        with caplog.at_level(logging.INFO, logger="ptserve"):
            pools.claim("first", settings(INTRA_OP_THREAD_COUNT="3"))
            pools.claim("second", settings(NUM_THREADS="2"))
            pools.claim("third", settings(NUM_THREADS="3"))
        assert torch.get_num_threads() == 3
        assert pools.intra == (3, "first")
        assert (
            "model 'second' asks for intra-op thread count 2, but the intra-op pool is "
            "process-wide and was already set to 3 by model 'first'; keeping 3"
        ) in caplog.text
        assert "model 'third'" not in caplog.text
    finally:
        torch.set_num_threads(original)


def test_a_thread_running_several_models_gets_each_its_pool_size() -> None:
    """The event loop runs short executions of any model: each gets its runtime's size."""
    original = torch.get_num_threads()
    pools = ThreadPools()
    pools.initial_intra = 2
    try:
        pools.enter_worker(1)  # a Python-runtime model
        assert torch.get_num_threads() == 1
        pools.enter_worker(None)  # a TorchScript model after it, on the same thread
        assert torch.get_num_threads() == 2
        pools.enter_worker(None)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(original)


def args(*pairs: str) -> list[Argument]:
    return [Argument(*pair.split(":")) for pair in pairs]


def test_binding_conventions(caplog: pytest.LogCaptureFixture) -> None:
    forward = args("b:Tensor", "a:Tensor")
    assert bind_inputs("m", forward, ["a", "b"]).order == ("b", "a")
    indexed = bind_inputs("m", forward, ["X__1", "Y__0"])
    assert indexed.order == ("Y__0", "X__1") and indexed.convention == "index suffix"
    with caplog.at_level(logging.WARNING, logger="ptserve"):
        plain = bind_inputs("m", forward, ["P", "Q"])
    assert plain.order == ("P", "Q") and "binding them in config order" in caplog.text
    mixed = bind_inputs("m", forward, ["A__0", "Q"])
    assert mixed.convention == "config order"
    assert bind_inputs("m", args("d:Dict[str, Tensor]"), ["x", "y"]).dictionary


def test_binding_errors_say_what_was_expected() -> None:
    with pytest.raises(ServerError) as info:
        bind_inputs("m", args("x:Tensor", "y:Tensor"), ["INPUT0"])
    message = info.value.message
    assert "unable to load model 'm', configuration expects 1 inputs, model provides 2" in message
    assert "the config has inputs (INPUT0)" in message
    assert "x: Tensor, y: Tensor" in message and "tried argument names" in message
    with pytest.raises(ServerError, match="index 5"):
        bind_inputs("m", args("x:Tensor"), ["I__5"])
    with pytest.raises(ServerError, match="both use index 0"):
        bind_inputs("m", args("x:Tensor", "y:Tensor"), ["I__0", "J__0"])
    with pytest.raises(ServerError, match="has type int"):
        bind_inputs("m", args("x:int"), ["x"])


def test_list_tuple_and_optional_arguments() -> None:
    binding = bind_inputs(
        "m", args("xs:List[Tensor]", "pair:Tuple[Tensor, Tensor]", "bias:Optional[Tensor]"),
        ["pair__1", "xs__0", "bias", "xs__2", "pair__0", "xs__1"],
    )  # fmt: skip
    assert [(s.names, s.packing) for s in binding.slots] == [
        (("xs__0", "xs__1", "xs__2"), "list"),
        (("pair__0", "pair__1"), "tuple"),
        (("bias",), ""),
    ]
    with pytest.raises(ServerError, match="without gaps"):
        bind_inputs("m", args("xs:List[Tensor]"), ["xs__0", "xs__2"])
    with pytest.raises(ServerError, match="gives it 3 input"):
        bind_inputs("m", args("p:Tuple[Tensor, Tensor]"), ["p__0", "p__1", "p__2"])
    with pytest.raises(ServerError, match="must be named <argument>__<index>"):
        bind_inputs("m", args("xs:List[Tensor]"), ["INPUT0"])


def test_output_positions() -> None:
    assert bind_outputs("m", ["OUT__1", "OUT__0"]) == (1, 0)
    assert bind_outputs("m", ["B", "A"]) == (0, 1)
    with pytest.raises(ServerError, match="both use index 1"):
        bind_outputs("m", ["A__1", "B__1"])


def _plan(outputs: str, batch: int = 8) -> OutputPlan:
    config = parse_config(
        f'name: "m" max_batch_size: {batch} '
        'input { name: "I" data_type: TYPE_FP32 dims: [1] } ' + outputs,
        "m",
    )
    return OutputPlan("m", model_io(config))


def _request(size: int, outputs: tuple[str, ...]) -> PreparedRequest:
    return PreparedRequest("r", {}, size, outputs)


def test_batched_strings_are_split_by_each_requests_offset() -> None:
    plan = _plan('output { name: "S" data_type: TYPE_STRING dims: [1] reshape: { shape: [] } }')
    parts = plan.split(["a", "b", "c"], [_request(1, ("S",)), _request(2, ("S",))])
    assert parts[0]["S"].tolist() == [b"a"]
    assert parts[1]["S"].tolist() == [b"b", b"c"]


def test_dict_results_are_mapped_by_name_and_lists_flattened() -> None:
    plan = _plan(
        'output { name: "B" data_type: TYPE_FP32 dims: [1] } '
        'output { name: "A" data_type: TYPE_FP32 dims: [1] }'
    )
    raw = {"A": torch.ones(2, 1), "B": torch.zeros(2, 1)}
    parts = plan.split(raw, [_request(1, ("A", "B")), _request(1, ("A",))])
    np.testing.assert_array_equal(parts[0]["A"], [[1.0]])
    np.testing.assert_array_equal(parts[0]["B"], [[0.0]])
    assert set(parts[1]) == {"A"}
    with pytest.raises(ServerError, match="dictionary without output 'B'"):
        plan.split({"A": torch.ones(1, 1)}, [_request(1, ("B",))])
    nested = (torch.ones(1), [torch.zeros(1), ["x", "y"]])
    assert len(flatten(nested)) == 3 and flatten(nested)[2] == ["x", "y"]


def test_results_that_require_grad_are_split_like_any_other() -> None:
    """A model may return a parameter, or compute with grad on: its results still reach
    numpy (which refuses a tensor that requires grad) with their values."""
    plan = _plan('output { name: "O" data_type: TYPE_FP32 dims: [1] }')
    weight = torch.nn.Parameter(torch.tensor([[1.0], [2.0], [3.0]]))
    computed = weight * 2
    assert weight.requires_grad and computed.grad_fn is not None
    for raw, first, rest in (
        (weight, [[1.0]], [[2.0], [3.0]]),
        (computed, [[2.0]], [[4.0], [6.0]]),
    ):
        parts = plan.split(raw, [_request(1, ("O",)), _request(2, ("O",))])
        np.testing.assert_array_equal(parts[0]["O"], first)
        np.testing.assert_array_equal(parts[1]["O"], rest)
    assert weight.requires_grad  # the model's own parameter is left as it was


def test_output_errors() -> None:
    plan = _plan('output { name: "O" data_type: TYPE_FP32 dims: [1] }')
    with pytest.raises(ServerError, match="expects datatype TYPE_FP32 for output 'O', model "):
        plan.split(torch.ones(1, 1, dtype=torch.int32), [_request(1, ("O",))])
    with pytest.raises(ServerError, match="scalar"):
        plan.split(torch.tensor(1.0), [_request(1, ("O",))])
    with pytest.raises(ServerError, match="batch dimension 1, but the batch holds 2"):
        plan.split(torch.ones(1, 1), [_request(2, ("O",))])


def test_results_in_any_layout_reach_numpy_contiguous() -> None:
    """A result that numpy reads as a strided view (a transpose) reaches each request as a
    contiguous array with the same values; one of the expected type is not copied."""
    plan = _plan('output { name: "O" data_type: TYPE_FP32 dims: [2] }')
    raw = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
    assert not raw.is_contiguous()
    parts = plan.split(raw, [_request(1, ("O",)), _request(2, ("O",))])
    np.testing.assert_array_equal(parts[0]["O"], [[0.0, 3.0]])
    np.testing.assert_array_equal(parts[1]["O"], [[1.0, 4.0], [2.0, 5.0]])
    assert all(part["O"].flags.c_contiguous for part in parts)
    plain = torch.zeros(3, 2)
    whole = plan.split(plain, [_request(3, ("O",))])[0]["O"]
    assert np.shares_memory(whole, plain.numpy())


def test_bf16_results_and_lookalikes() -> None:
    """BF16 has no numpy type: its results come as their bit patterns, and a 16-bit integer
    result (which numpy would read as the same dtype) is still refused for a BF16 output."""
    plan = _plan('output { name: "O" data_type: TYPE_BF16 dims: [1] }')
    raw = torch.tensor([[1.0], [2.0]], dtype=torch.bfloat16)
    parts = plan.split(raw, [_request(2, ("O",))])
    np.testing.assert_array_equal(parts[0]["O"], raw.view(torch.int16).numpy().view(np.uint16))
    with pytest.raises(ServerError, match="expects datatype TYPE_BF16 for output 'O', model "):
        plan.split(torch.ones(2, 1, dtype=torch.uint16), [_request(2, ("O",))])
