"""Which config tensor is which tensor of a ``.pt2`` program: by ordinal (``INPUT__n`` /
``OUTPUT__n``), by its place in ``forward`` (``ARGS[i][key]``, ``KWARGS[key]``,
``RESULT[key][i]``), or in config order; and sequence models, whose control and state tensors
reach the program by those names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from torch import nn
from torch.export import Dim, export

from ptserve.backends.pytorch.pt2_names import leaf_names
from tests.backends.pytorch.helpers import write_config_only
from tests.serverproc import ServerProcess

SHAPE = (1, 16)


class Complex(nn.Module):
    def forward(
        self,
        hdata: torch.Tensor,
        vdata: torch.Tensor,
        options: dict[str, torch.Tensor],
        *,
        scale: torch.Tensor,
    ) -> dict[str, torch.Tensor | tuple[torch.Tensor, torch.Tensor] | dict[str, torch.Tensor]]:
        return {
            "AAA": hdata + vdata,
            "ZZZ": hdata - vdata,
            "BBB": (hdata, vdata * scale),
            "CCC": options,
        }


class Sequence(nn.Module):
    """A running sum reset by START, plus the correlation id, gated by READY."""

    def forward(
        self,
        data: torch.Tensor,
        state: torch.Tensor,
        start: torch.Tensor,
        ready: torch.Tensor,
        corrid: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        new_state = data + state * (1 - start)
        return (new_state + corrid.to(new_state.dtype)) * ready, new_state


def complex_program() -> torch.export.ExportedProgram:
    def zeros() -> torch.Tensor:  # a tensor each: export would take one tensor passed twice as one
        return torch.zeros(SHAPE, dtype=torch.int8)

    options = {"option1": zeros(), "option2": zeros()}
    return export(Complex(), (zeros(), zeros(), options), {"scale": zeros()})


def sequence_program() -> torch.export.ExportedProgram:
    batch = Dim("batch", min=1, max=8)
    example = (*(torch.zeros(2, 1) for _ in range(4)), torch.zeros(2, 1, dtype=torch.int32))
    return export(Sequence(), example, dynamic_shapes=tuple({0: batch} for _ in range(5)))


def io(kind: str, names: list[str]) -> str:
    entries = ", ".join(f'{{ name: "{n}" data_type: TYPE_INT8 dims: [ 1, 16 ] }}' for n in names)
    return f"{kind} [ {entries} ]"


NAMED_INPUTS = ["ARGS[0]", "ARGS[1]", "ARGS[2][option1]", "ARGS[2][option2]", "KWARGS[scale]"]
# Listed alphabetically, as in the reference's example: the names, not the order, decide.
NAMED_OUTPUTS = [
    "RESULT[AAA]",
    "RESULT[BBB][0]",
    "RESULT[BBB][1]",
    "RESULT[CCC][option1]",
    "RESULT[CCC][option2]",
    "RESULT[ZZZ]",
]
ORDINAL_INPUTS = [f"INPUT__{i}" for i in range(5)]
ORDINAL_OUTPUTS = [f"OUTPUT__{i}" for i in range(6)]


def complex_config(name: str, inputs: list[str], outputs: list[str]) -> str:
    return f"""
        name: "{name}"
        platform: "torch_aoti"
        max_batch_size: 0
        {io("input", inputs)}
        {io("output", outputs)}
    """


def sequence_config(name: str, names: dict[str, str]) -> str:
    return f"""
        name: "{name}"
        platform: "torch_aoti"
        max_batch_size: 8
        sequence_batching {{
          max_sequence_idle_microseconds: 5000000
          control_input [
            {{ name: "{names["start"]}"
               control [ {{ kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] }} ] }},
            {{ name: "{names["ready"]}"
               control [ {{ kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] }} ] }},
            {{ name: "{names["corrid"]}"
               control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT32 }} ] }}
          ]
          state [ {{ input_name: "{names["state_in"]}" output_name: "{names["state_out"]}"
                    data_type: TYPE_FP32 dims: [ 1 ] }} ]
        }}
        input [ {{ name: "{names["data"]}" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        output [ {{ name: "{names["out"]}" data_type: TYPE_FP32 dims: [ 1 ] }} ]
    """


ORDINAL_SEQUENCE = {
    "data": "INPUT__0",
    "state_in": "INPUT__1",
    "start": "INPUT__2",
    "ready": "INPUT__3",
    "corrid": "INPUT__4",
    "out": "OUTPUT__0",
    "state_out": "OUTPUT__1",
}
NAMED_SEQUENCE = {
    "data": "ARGS[0]",
    "state_in": "ARGS[1]",
    "start": "ARGS[2]",
    "ready": "ARGS[3]",
    "corrid": "ARGS[4]",
    "out": "RESULT[0]",
    "state_out": "RESULT[1]",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("pt2-names")
    program = complex_program()
    for name, inputs, outputs in (
        ("complex_named", NAMED_INPUTS, NAMED_OUTPUTS),
        ("complex_ordinal", ORDINAL_INPUTS, ORDINAL_OUTPUTS),
    ):
        folder = write_config_only(repo, name, complex_config(name, inputs, outputs))
        torch.export.save(program, str(folder / "1" / "model.pt2"))
    sequence = sequence_program()
    for name, names in (("sequence_ordinal", ORDINAL_SEQUENCE), ("sequence_named", NAMED_SEQUENCE)):
        folder = write_config_only(repo, name, sequence_config(name, names))
        torch.export.save(sequence, str(folder / "1" / "model.pt2"))
    packaged = write_config_only(
        repo, "sequence_aoti", sequence_config("sequence_aoti", ORDINAL_SEQUENCE)
    )
    # Compiles C++ with the local gcc (tens of seconds on two cores).
    torch._inductor.aoti_compile_and_package(
        sequence, package_path=str(packaged / "1" / "model.pt2")
    )
    process = ServerProcess([repo]).start()
    yield process
    process.stop()


def test_leaf_names_follow_the_call_spec() -> None:
    spec = complex_program().call_spec
    assert leaf_names(spec.in_spec, True) == NAMED_INPUTS
    # The result's leaves in its own order: the dictionary's insertion order.
    assert leaf_names(spec.out_spec, False) == [
        "RESULT[AAA]",
        "RESULT[ZZZ]",
        "RESULT[BBB][0]",
        "RESULT[BBB][1]",
        "RESULT[CCC][option1]",
        "RESULT[CCC][option2]",
    ]


@pytest.mark.parametrize(
    ("model", "inputs", "outputs"),
    [
        ("complex_named", NAMED_INPUTS, NAMED_OUTPUTS),
        ("complex_ordinal", ORDINAL_INPUTS, ORDINAL_OUTPUTS),
    ],
)
def test_nested_inputs_and_results_by_name_or_ordinal(
    server: ServerProcess, model: str, inputs: list[str], outputs: list[str]
) -> None:
    rng = np.random.default_rng(7)
    data = [rng.integers(0, 10, SHAPE, dtype=np.int8) for _ in inputs]
    h, v, option1, option2, scale = data
    client = httpclient.InferenceServerClient(server.http_url)
    tensors = []
    for name, array in zip(inputs, data, strict=True):
        tensor = httpclient.InferInput(name, list(SHAPE), "INT8")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = client.infer(model, tensors)
    expected = {  # by leaf: AAA, ZZZ, BBB[0], BBB[1], CCC[option1], CCC[option2]
        0: h + v,
        1: h - v,
        2: h,
        3: v * scale,
        4: option1,
        5: option2,
    }
    by_name = dict(zip(NAMED_OUTPUTS, (0, 2, 3, 4, 5, 1), strict=True))
    for name in outputs:
        leaf = int(name[len("OUTPUT__") :]) if name.startswith("OUTPUT__") else by_name[name]
        np.testing.assert_array_equal(result.as_numpy(name), expected[leaf], err_msg=name)


@pytest.mark.parametrize("model", ["sequence_ordinal", "sequence_named", "sequence_aoti"])
def test_sequence_controls_and_state_reach_their_arguments(
    server: ServerProcess, model: str
) -> None:
    """Before, the controls went in config order, so START landed on the state argument and an
    INT32 correlation id was read as float bits."""
    client = httpclient.InferenceServerClient(server.http_url)
    name = ORDINAL_SEQUENCE["data"] if model != "sequence_named" else NAMED_SEQUENCE["data"]
    out = ORDINAL_SEQUENCE["out"] if model != "sequence_named" else NAMED_SEQUENCE["out"]
    seen = []
    for step, value in enumerate((1.0, 2.0, 3.0)):
        tensor = httpclient.InferInput(name, [1, 1], "FP32")
        tensor.set_data_from_numpy(np.array([[value]], np.float32))
        result = client.infer(
            model, [tensor], sequence_id=100, sequence_start=step == 0, sequence_end=step == 2
        )
        seen.append(float(result.as_numpy(out)[0, 0]))
    assert seen == [101.0, 103.0, 106.0]  # running sums 1, 3, 6 plus the correlation id 100


def test_names_that_fit_no_convention_fail_the_load(tmp_path: Path) -> None:
    config = complex_config("bad", [*NAMED_INPUTS[:4], "KWARGS[nope]"], NAMED_OUTPUTS)
    folder = write_config_only(tmp_path, "bad", config)
    torch.export.save(complex_program(), str(folder / "1" / "model.pt2"))
    lenient = ["--exit-on-error=false", "--strict-readiness=false"]
    with ServerProcess([tmp_path], lenient) as running:
        log = running.log()
    assert "mix or miss the two naming conventions" in log
    assert "INPUT__4 or KWARGS[scale]" in log
