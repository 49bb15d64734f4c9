"""Ragged batching through the real server: requests of different lengths share one batch, the
model gets their inputs end to end plus the batch inputs, and a batch output is scattered back."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from torch import nn
from tritonclient.utils import InferenceServerException

from ptserve.examples import write_model
from tests.serverproc import ServerProcess


class RaggedRows(nn.Module):
    """Per batch row: the sum of its elements, and what the batch inputs said about the batch."""

    def forward(
        self,
        RAGGED: torch.Tensor,
        OFFSETS: torch.Tensor,
        ITEMS: torch.Tensor,
        LONGEST: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows = ITEMS.size(0)
        sums: list[torch.Tensor] = []
        start = 0
        for row in range(rows):
            length = int(ITEMS[row, 0])
            sums.append(RAGGED[start : start + length].sum())
            start += length
        requests = float(OFFSETS.size(0) - 1)
        total = float(OFFSETS[-1])
        facts = torch.tensor([requests, total, float(LONGEST.size(0)), float(RAGGED.dim())])
        return torch.stack(sums).view(rows, 1), facts.repeat(rows, 1), RAGGED * 2


CONFIG = """
    name: "ragged"
    platform: "pytorch_libtorch"
    max_batch_size: 8
    input [ { name: "RAGGED" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
    output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] },
             { name: "FACTS" data_type: TYPE_FP32 dims: [ 4 ] },
             { name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] } ]
    batch_input [
      { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "OFFSETS"
        data_type: TYPE_INT32 source_input: "RAGGED" },
      { kind: BATCH_ITEM_SHAPE target_name: "ITEMS" data_type: TYPE_FP32 source_input: "RAGGED" },
      { kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: "LONGEST" data_type: TYPE_FP32
        source_input: "RAGGED" } ]
    batch_output [
      { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "DOUBLED" source_input: "RAGGED" } ]
    instance_group [ { count: 1 kind: KIND_CPU } ]
    dynamic_batching { }
"""

# Four requests (one of batch size 2): 3 + 2 x 2 + 1 + 5 = 13 elements in 5 rows; the longest
# request holds 5 elements.
SHAPES = [(1, 3), (2, 2), (1, 1), (1, 5)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("ragged")
    write_model(repo, "ragged", CONFIG, {1: torch.jit.script(RaggedRows())})
    # The first batch forms only once all four requests wait: one deterministic batch.
    with ServerProcess([repo], env={"TRITONSERVER_DELAY_SCHEDULER": str(len(SHAPES))}) as process:
        yield process


def _infer(url: str, data: np.ndarray) -> dict[str, np.ndarray]:
    client = httpclient.InferenceServerClient(url)
    try:
        tensor = httpclient.InferInput("RAGGED", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer("ragged", [tensor])
        return {name: result.as_numpy(name) for name in ("SUM", "FACTS", "DOUBLED")}
    finally:
        client.close()


def _stats(url: str) -> Any:
    with urllib.request.urlopen(f"http://{url}/v2/models/ragged/stats", timeout=10) as reply:
        [entry] = json.loads(reply.read())["model_stats"]
    return entry


def test_requests_of_different_lengths_run_as_one_batch(server: ServerProcess) -> None:
    datas = [
        np.arange(1, 1 + int(np.prod(shape)), dtype=np.float32).reshape(shape) * (i + 1)
        for i, shape in enumerate(SHAPES)
    ]
    with ThreadPoolExecutor(len(datas)) as pool:
        answers = list(pool.map(lambda data: _infer(server.http_url, data), datas, timeout=60))
    for data, answer in zip(datas, answers, strict=True):
        rows = data.shape[0]
        assert answer["SUM"].tolist() == data.sum(axis=1, keepdims=True).tolist()
        # 4 requests, 13 elements, the longest 5, and the ragged input one-dimensional.
        assert answer["FACTS"].tolist() == [[4.0, 13.0, 5.0, 1.0]] * rows
        assert answer["DOUBLED"].shape == data.shape
        assert answer["DOUBLED"].tolist() == (data * 2).tolist()
    entry = _stats(server.http_url)
    histogram = {b["batch_size"]: b["compute_infer"]["count"] for b in entry["batch_stats"]}
    assert histogram == {5: 1}  # one execution of all 5 rows
    assert entry["execution_count"] == 1 and entry["inference_count"] == 5
    assert entry["inference_stats"]["success"]["count"] == len(SHAPES)


def test_a_client_may_not_send_a_batch_input(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        ragged = httpclient.InferInput("RAGGED", [1, 2], "FP32")
        ragged.set_data_from_numpy(np.ones((1, 2), np.float32))
        offsets = httpclient.InferInput("OFFSETS", [1, 2], "INT32")
        offsets.set_data_from_numpy(np.zeros((1, 2), np.int32))
        with pytest.raises(InferenceServerException, match="unexpected inference input 'OFFSETS'"):
            client.infer("ragged", [ragged, offsets])
    finally:
        client.close()


def test_metadata_lists_only_what_clients_send(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        metadata = client.get_model_metadata("ragged")
    finally:
        client.close()
    assert [i["name"] for i in metadata["inputs"]] == ["RAGGED"]
    assert [o["name"] for o in metadata["outputs"]] == ["SUM", "FACTS", "DOUBLED"]
