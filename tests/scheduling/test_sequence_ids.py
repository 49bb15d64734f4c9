"""Correlation ids in the sequence batcher, as the reference keeps them: a sequence's END frees
its id at once (a new START takes a slot of its own, or waits in the backlog), and a START on an
id that never ended goes on in that sequence's slot."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from ptserve.common.errors import ServerError
from ptserve.common.prepared import PreparedRequest
from ptserve.common.stats import ModelStats
from ptserve.config.io import model_io
from ptserve.config.parse import parse_config
from ptserve.config.validate import validate_config
from ptserve.scheduling.params import RequestOptions
from ptserve.scheduling.sequence.batcher import SequenceBatcher
from ptserve.scheduling.sequence.rows import RowBuilder
from ptserve.scheduling.sequence.slots import Sequence
from ptserve.scheduling.work import WorkItem

CONFIG = """
    name: "seq"
    max_batch_size: 1
    input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
    output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
    sequence_batching { direct { } }
"""


def batcher() -> SequenceBatcher:
    config = parse_config(CONFIG, "seq")
    return SequenceBatcher(ModelStats(), model_io(config), config, instances=1)


def item(sequence_id: int, start: bool = False, end: bool = False, rows: int = 1) -> WorkItem:
    request = PreparedRequest("", {"INPUT": np.zeros((rows, 1), np.float32)}, rows, ("OUTPUT",))
    options = RequestOptions(sequence_id=sequence_id, start=start, end=end)
    return WorkItem(request, asyncio.get_running_loop(), options)


async def test_a_start_after_an_end_is_a_new_sequence_waiting_for_a_slot() -> None:
    scheduler = batcher()  # one slot
    first = [item(7, start=True), item(7), item(7, end=True)]
    for queued in first:
        scheduler.enqueue(queued)
    again = item(7, start=True, end=True)
    scheduler.enqueue(again)  # the slot is taken: the new sequence waits in the backlog
    assert [len(s.pending) for s in scheduler.table.backlog] == [1]
    order = []
    for _ in range(4):
        batch = scheduler.next_batch(0)
        assert batch is not None
        [run] = [i for i in batch.items if i is not None]
        order.append(run)
        scheduler.finish(batch, [{"OUTPUT": np.zeros((1, 1), np.float32)}])
    assert order == [*first, again]


async def test_a_start_on_a_sequence_that_did_not_end_goes_on_in_its_slot() -> None:
    scheduler = batcher()
    scheduler.enqueue(item(7, start=True))
    scheduler.enqueue(item(7, start=True))  # a conflict: the earlier one ends early
    assert not scheduler.table.backlog
    assert [len(slot.sequence.pending) for slot in scheduler.table.slots if slot.sequence] == [2]


async def test_without_start_an_unknown_or_ended_id_is_refused() -> None:
    scheduler = batcher()
    with pytest.raises(ServerError, match="must specify the START flag"):
        scheduler.enqueue(item(3))
    scheduler.enqueue(item(3, start=True, end=True))
    with pytest.raises(ServerError, match="must specify the START flag"):
        scheduler.enqueue(item(3))


async def test_a_batch_of_several_rows_is_refused_in_the_reference_words() -> None:
    with pytest.raises(
        ServerError,
        match="inference request to model 'seq' must specify batch-size 1 due to requirements "
        "of sequence batcher",
    ):
        batcher().enqueue(item(5, start=True, rows=2))


async def test_an_empty_slot_below_a_ready_one_is_a_filler_row_that_counts_in_the_size() -> None:
    config = parse_config(CONFIG.replace("max_batch_size: 1", "max_batch_size: 2"), "seq")
    scheduler = SequenceBatcher(ModelStats(), model_io(config), config, instances=1)
    scheduler.enqueue(item(1, start=True, end=True))  # row 0, one request
    scheduler.enqueue(item(2, start=True))  # row 1, two
    scheduler.enqueue(item(2, end=True))
    first = scheduler.next_batch(0)
    assert first is not None and (first.size, first.rows) == (2, 2)
    scheduler.finish(first, [{"OUTPUT": np.zeros((1, 1), np.float32)}] * 2)
    second = scheduler.next_batch(0)
    assert second is not None and second.items[0] is None  # row 0 keeps row 1 in its place
    assert (second.size, second.rows) == (2, 1)


def test_filler_rows_count_in_the_batch_size_but_not_as_inferences() -> None:
    stats = ModelStats()
    stats.record_execution(2, 0, 0, 0, inferences=1)
    assert (stats.execution_count, stats.inference_count) == (1, 1)
    assert list(stats.batches) == [2]


STATE_ALSO_OUTPUT = """
    name: "seq"
    max_batch_size: 1
    input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
    output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] },
             { name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
    sequence_batching {
      direct { }
      state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32
                dims: [ 1 ] } ]
    }
"""


def test_a_state_output_may_also_be_a_config_output_and_reach_the_client() -> None:
    config = parse_config(STATE_ALSO_OUTPUT, "seq")
    validate_config(config)  # (the reference allows it)
    io = model_io(config)
    assert [s.name for s in io.model_outputs] == ["OUTPUT", "STATE_OUT"]
    rows = RowBuilder(io, "seq")
    sequence = Sequence(1, 0)
    answer = {"OUTPUT": np.ones((1, 1), np.float32), "STATE_OUT": np.full((1, 1), 7, np.float32)}
    rows.keep_state(sequence, answer, requested=("OUTPUT", "STATE_OUT"))
    assert answer["STATE_OUT"].tolist() == [[7]]  # the client asked for it: it stays
    assert sequence.state["STATE_IN"].tolist() == [[7]]
    rows.keep_state(sequence, answer, requested=("OUTPUT",))
    assert "STATE_OUT" not in answer
