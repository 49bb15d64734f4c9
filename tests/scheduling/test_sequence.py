"""The sequence batcher through the real server: slots, controls, state, idle release, errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from ptserve.examples import write_model
from tests.scheduling import models
from tests.scheduling.helpers import Background, assert_stats_add_up, stats
from tests.serverproc import ServerProcess

CONTROLS = """
    control_input [
      { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
      { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
      { name: "READY"
        control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
      { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT64 } ] }
    ]
    state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def _probe_config(name: str, max_batch_size: int, batching: str) -> str:
    return f"""
        name: "{name}"
        platform: "pytorch_libtorch"
        max_batch_size: {max_batch_size}
        input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 7 ] }} ]
        instance_group [ {{ count: 1 kind: KIND_CPU }} ]
        sequence_batching {{ {batching} {CONTROLS} }}
    """


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("sequence")
    probe = {1: models.script(models.SequenceProbe())}
    write_model(repo, "direct", _probe_config("direct", 4, "direct { }"), probe)
    write_model(
        repo,
        "idle",
        _probe_config("idle", 1, "max_sequence_idle_microseconds: 300000"),
        probe,
    )
    write_model(
        repo,
        "oldest",
        """
        name: "oldest"
        platform: "pytorch_libtorch"
        max_batch_size: 4
        input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [
          { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] },
          { name: "SIZE" data_type: TYPE_FP32 dims: [ 1 ] }
        ]
        instance_group [ { count: 1 kind: KIND_CPU } ]
        sequence_batching {
          oldest {
            max_candidate_sequences: 4
            preferred_batch_size: [ 4 ]
            max_queue_delay_microseconds: 300000
          }
          control_input [
            { name: "READY"
              control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] }
          ]
          state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32
                    dims: [ 1 ] } ]
        }
        """,
        {1: models.script(models.StringSequenceProbe())},
    )
    with ServerProcess([repo]) as process:
        yield process


def _send(
    server: ServerProcess, model: str, value: float, sequence_id: Any, **flags: bool
) -> dict[str, np.ndarray]:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.float32))
    try:
        result = client.infer(model, [tensor], sequence_id=sequence_id, **flags)
        outputs = {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}
        return outputs
    finally:
        client.close()


def test_controls_and_state_follow_one_sequence(server: ServerProcess) -> None:
    first = _send(server, "direct", 1, 42, sequence_start=True)
    middle = _send(server, "direct", 2, 42)
    last = _send(server, "direct", 3, 42, sequence_end=True)
    # [START, END, READY, CORRID, state, row, batch size]
    assert first["OUTPUT"][0, :5].tolist() == [1, 0, 1, 42, 1]
    assert middle["OUTPUT"][0, :5].tolist() == [0, 0, 1, 42, 3]
    assert last["OUTPUT"][0, :5].tolist() == [0, 1, 1, 42, 6]
    assert set(first) == {"OUTPUT"}, "the state output is the server's, not the client's"
    # A new sequence with the same id starts from the initial state again.
    again = _send(server, "direct", 5, 42, sequence_start=True, sequence_end=True)
    assert again["OUTPUT"][0, :5].tolist() == [1, 1, 1, 42, 5]


def test_sequences_keep_their_slot_and_state(server: ServerProcess) -> None:
    def run(sequence_id: int) -> list[list[float]]:
        rows = []
        for step in range(5):
            flags = {"sequence_start": step == 0, "sequence_end": step == 4}
            rows.append(_send(server, "direct", sequence_id, sequence_id, **flags)["OUTPUT"][0])
        return [row.tolist() for row in rows]

    jobs = Background()
    for sequence_id in (1001, 1002, 1003):
        jobs.start(lambda sequence_id=sequence_id: run(sequence_id))
    for sequence_id, rows in zip((1001, 1002, 1003), jobs.results(), strict=True):
        assert [r[3] for r in rows] == [sequence_id] * 5
        assert [r[4] for r in rows] == [sequence_id * k for k in range(1, 6)]
        assert all(r[2] == 1 for r in rows)  # READY
        assert len({r[5] for r in rows}) == 1, f"sequence {sequence_id} changed rows: {rows}"
    entry = stats(server.http_url, "direct")
    assert_stats_add_up(entry, fillers=True)


def test_requests_outside_a_sequence_are_refused(server: ServerProcess) -> None:
    with pytest.raises(InferenceServerException) as caught:
        _send(server, "direct", 1, 777)
    assert caught.value.status() == "400"
    assert "777" in caught.value.message() and "'direct'" in caught.value.message()
    assert "START" in caught.value.message()

    _send(server, "direct", 1, 778, sequence_start=True, sequence_end=True)
    with pytest.raises(InferenceServerException) as caught:
        _send(server, "direct", 1, 778)
    assert caught.value.status() == "400" and "778" in caught.value.message()

    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[1]], dtype=np.float32))
    with pytest.raises(InferenceServerException) as caught:
        client.infer("direct", [tensor])
    assert caught.value.status() == "400" and "correlation ID" in caught.value.message()
    client.close()


def test_idle_sequences_are_released(server: ServerProcess) -> None:
    _send(server, "idle", 1, 5, sequence_start=True)
    time.sleep(1.0)  # the idle limit is 0.3 s
    with pytest.raises(InferenceServerException) as caught:
        _send(server, "idle", 1, 5)
    assert caught.value.status() == "400" and "5" in caught.value.message()

    # The model has one slot: a second sequence waits until the abandoned one is released.
    _send(server, "idle", 1, 6, sequence_start=True)
    started = time.monotonic()
    result = _send(server, "idle", 2, 7, sequence_start=True, sequence_end=True)
    waited = time.monotonic() - started
    assert result["OUTPUT"][0, :5].tolist() == [1, 1, 1, 7, 2]
    assert 0.15 <= waited < 5.0


def test_oldest_batches_string_sequences(server: ServerProcess) -> None:
    def run(sequence_id: str, value: float) -> tuple[list[float], list[float]]:
        sums, sizes = [], []
        for step in range(3):
            flags = {"sequence_start": step == 0, "sequence_end": step == 2}
            outputs = _send(server, "oldest", value, sequence_id, **flags)
            sums.append(float(outputs["OUTPUT"][0, 0]))
            sizes.append(float(outputs["SIZE"][0, 0]))
        return sums, sizes

    jobs = Background()
    for index, name in enumerate(("seq-a", "seq-b", "seq-c", "seq-d")):
        jobs.start(lambda name=name, index=index: run(name, index + 1))
    all_sizes: list[float] = []
    for index, (sums, sizes) in enumerate(jobs.results()):
        value = index + 1
        assert sums == [value, 2 * value, 3 * value]
        all_sizes += sizes
    assert max(all_sizes) > 1, "the oldest strategy batches different sequences together"
    assert_stats_add_up(stats(server.http_url, "oldest"))


def test_sequence_model_warms_up_with_zero_controls(tmp_path: Path) -> None:
    """model_warmup names only the client's inputs; controls and state are filled with zeros."""
    warmup = """
        model_warmup [ { name: "zeros" batch_size: 2 count: 3 inputs { key: "INPUT" value: {
            data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } } ]
    """
    config = _probe_config("warm", 4, "direct { }") + warmup
    write_model(tmp_path, "warm", config, {1: models.script(models.SequenceProbe())})
    with ServerProcess([tmp_path], ["--log-verbose=1"]) as server:
        log = server.log()
        assert "warm-up 'zeros' ran 3 time(s)" in log
        for iteration in (1, 2, 3):  # the reference's verbose lines
            assert f"is running warmup sample 'zeros' for iteration {iteration}" in log
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_model_ready("warm")
