"""The console's pure JavaScript modules run by Node against ptserve's own Python: the
config.pbtxt rendering parses back to the same configuration, the Prometheus parser reads the
server's text, the statistics arithmetic, and the tensor encodings match numpy's and ptserve's.
Skipped where ``node`` is absent."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format

from ptserve.common.datatypes import float32_to_bf16, serialize_bytes
from ptserve.config.parse import ModelConfig, parse_config
from ptserve.config.render import config_to_dict
from ptserve.frontends.console.schema import config_schema
from tests.frontends.http.rawhttp import request
from tests.serverproc import ServerProcess

JS = Path(__file__).resolve().parents[3] / "src" / "ptserve" / "frontends" / "console" / "static"
JS = JS / "js"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="needs node to run the console's modules")


def run(tmp_path: Path, body: str, data: Any = None) -> Any:
    """Run ``body`` (an async function body that gets ``data`` and returns a JSON value) as an
    ES module that can import the console's modules by name."""
    imports = "\n".join(
        f'import * as {name} from "{(JS / f"{name}.js").as_uri()}";'
        for name in ("pbtxt", "metrics", "series", "tensors")
    )
    script = tmp_path / "run.mjs"
    (tmp_path / "data.json").write_text(json.dumps(data))
    script.write_text(
        f"{imports}\nimport {{ readFileSync }} from 'node:fs';\n"
        f"const data = JSON.parse(readFileSync({json.dumps(str(tmp_path / 'data.json'))}));\n"
        f"const result = await (async () => {{\n{textwrap.dedent(body)}\n}})();\n"
        "process.stdout.write(JSON.stringify(result));\n"
    )
    assert NODE is not None
    done = subprocess.run([NODE, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


RICH = r"""
name: "rich \"one\"\nline"
platform: "pytorch_libtorch"
max_batch_size: 16
version_policy { specific { versions: [ 1, 3 ] } }
input [
  { name: "INPUT__0" data_type: TYPE_FP16 dims: [ -1, 3 ] reshape { shape: [ 3, -1 ] }
    optional: true allow_ragged_batch: true },
  { name: "ids" data_type: TYPE_STRING format: FORMAT_NCHW dims: [ 1 ] reshape { } }
]
output [ { name: "OUTPUT__0" data_type: TYPE_BF16 dims: [ 10 ] label_filename: "labels.txt" } ]
instance_group [ { name: "g" kind: KIND_GPU count: 2 gpus: [ 0, 1 ] },
                 { kind: KIND_CPU count: 1 } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000
                         allow_timeout_override: true max_queue_size: 7 }
  priority_queue_policy { key: 2 value { max_queue_size: 3 } }
}
parameters { key: "INFERENCE_MODE" value { string_value: "true" } }
parameters { key: "weird key \\ é" value { string_value: "tab\there" } }
model_warmup [ { name: "w" batch_size: 2
  inputs { key: "INPUT__0" value { data_type: TYPE_FP16 dims: [ 3 ] random_data: true } } } ]
metric_tags { key: "team" value: "infra" }
optimization { priority: PRIORITY_MAX input_pinned_memory { enable: false } }
"""

SEQUENCE = """
name: "seq"
backend: "pytorch"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "y" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] }
  max_sequence_idle_microseconds: 1000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "s_in" output_name: "s_out" data_type: TYPE_FP32 dims: [ 2 ]
            initial_state [ { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true name: "z" } ] } ]
}
"""

ENSEMBLE = """
name: "ens"
platform: "ensemble"
ensemble_scheduling { step [ { model_name: "a" model_version: -1
  input_map { key: "i" value: "x" } output_map { key: "o" value: "y" } } ] }
"""


def served_configs(server: ServerProcess) -> list[dict[str, Any]]:
    configs = []
    for model in ("mlp", "simple", "versioned", "fails"):
        status, _, body = request(server.http_url, "GET", f"/v2/models/{model}/config")
        assert status == 200
        configs.append(json.loads(body))
    return configs


def test_pbtxt_parses_back_to_the_same_config(
    tmp_path: Path, console_server: ServerProcess
) -> None:
    configs = [
        config_to_dict(parse_config(RICH, "rich")),
        config_to_dict(parse_config(SEQUENCE, "seq")),
        config_to_dict(parse_config(ENSEMBLE, "ens")),
        config_to_dict(ModelConfig()),
        *served_configs(console_server),
    ]
    texts = run(
        tmp_path,
        "return data.configs.map((c) => pbtxt.toPbtxt(c, data.schema));",
        {"configs": configs, "schema": config_schema()},
    )
    for config, text in zip(configs, texts, strict=True):
        expected = json_format.ParseDict(config, ModelConfig())
        assert parse_config(text, "the console's text") == expected, text
    # As people write it: enums bare, strings quoted, repeated numbers as lists, maps as entries.
    rich = texts[0]
    assert 'name: "rich \\"one\\"\\nline"' in rich
    assert "data_type: TYPE_FP16" in rich and "dims: [ -1, 3 ]" in rich
    assert "priority_queue_policy {\n    key: 2\n" in rich
    assert '  key: "INFERENCE_MODE"\n  value {\n    string_value: "true"\n  }' in rich
    assert "reshape { }" in rich  # present though empty: it means something
    assert "is_shape_tensor" not in rich  # proto3 defaults left out


def test_metrics_parser_reads_the_servers_text(
    tmp_path: Path, console_server: ServerProcess
) -> None:
    status, _, body = request(console_server.http_url, "GET", "/v2/metrics")
    assert status == 200
    text = body.decode() + 'odd{a="q\\"uote",b="back\\\\slash",c="new\\nline"} 2.5\nbare 7\n'
    samples = run(tmp_path, "return metrics.parseMetrics(data);", text)
    expected = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        expected.append((name_labels.split("{")[0], float(value)))
    assert [(s["name"], s["value"]) for s in samples] == expected
    assert samples[-2]["labels"] == {"a": 'q"uote', "b": "back\\slash", "c": "new\nline"}
    failures = [s for s in samples if s["name"] == "nv_inference_request_failure"]
    assert {s["labels"]["reason"] for s in failures} == {"REJECTED", "CANCELED", "BACKEND", "OTHER"}


def stats_entry(
    version: str, success: int, success_ns: int, fail: int, batches: dict[int, int]
) -> Any:
    duration = {"count": success, "ns": success_ns}
    return {
        "name": "m",
        "version": version,
        "inference_count": success,
        "execution_count": sum(batches.values()),
        "inference_stats": {
            "success": duration,
            "fail": {"count": fail, "ns": fail * 1000},
            "queue": {"count": success, "ns": success_ns // 4},
            "compute_input": {"count": success, "ns": success_ns // 8},
            "compute_infer": {"count": success, "ns": success_ns // 2},
            "compute_output": {"count": success, "ns": success_ns // 8},
        },
        "batch_stats": [
            {
                "batch_size": size,
                "compute_input": {"count": n, "ns": 0},
                "compute_infer": {"count": n, "ns": 0},
                "compute_output": {"count": n, "ns": 0},
            }
            for size, n in batches.items()
        ],
    }


def test_rates_and_means_between_polls(tmp_path: Path) -> None:
    first = {"model_stats": [stats_entry("1", 100, 100 * 2_000_000, 1, {1: 50, 2: 25})]}
    second = {
        "model_stats": [
            stats_entry("1", 300, 100 * 2_000_000 + 200 * 4_000_000, 3, {1: 50, 2: 75, 4: 1}),
            stats_entry("2", 10, 10 * 1_000_000, 0, {1: 10}),
        ]
    }
    reloaded = {"model_stats": [stats_entry("1", 5, 5 * 1_000_000, 0, {1: 5})]}
    result = run(
        tmp_path,
        """
        const a = series.modelTotals(data.first, "m", "1");
        const b = series.modelTotals(data.second, "m", "1");
        const all = series.modelTotals(data.second, "m");
        const r = series.modelTotals(data.reloaded, "m", "1");
        const name = "nv_inference_request_summary_us";
        const text = `${name}{model="m",version="1",quantile="0.5"} 1500\\n` +
          `${name}{model="m",version="1",quantile="0.99"} 0\\n`;
        return {
          iv: series.interval(a, b, 2),
          reset: series.interval(b, r, 1),
          all: all.versions,
          allSuccess: all.success.count,
          batches: series.batchCounts(a, b),
          afterReset: series.batchCounts(b, r),
          missing: series.modelTotals(data.second, "nosuch"),
          quantiles: series.summaryQuantiles(metrics.parseMetrics(text), "m", "1"),
          noSummaries: series.summaryQuantiles([], "m", "1"),
        };
        """,
        {"first": first, "second": second, "reloaded": reloaded},
    )
    iv = result["iv"]
    assert iv["successPerSecond"] == 100 and iv["failedPerSecond"] == 1
    assert iv["requestsPerSecond"] == 101 and iv["executionsPerSecond"] == 25.5
    assert iv["meanMs"] == pytest.approx(4.0)  # only the 200 new requests, 4 ms each
    assert iv["queueMs"] == pytest.approx(1.0)
    assert iv["computeMs"] == pytest.approx(3.0)
    assert result["reset"] is None  # a counter went down: no made-up rate
    assert result["all"] == ["1", "2"] and result["allSuccess"] == 310
    assert result["batches"] == [
        {"size": 1, "count": 0},
        {"size": 2, "count": 50},
        {"size": 4, "count": 1},
    ]
    assert result["afterReset"] == [{"size": 1, "count": 5}]
    assert result["missing"] is None
    assert result["quantiles"] == [{"quantile": 0.5, "ms": 1.5}, {"quantile": 0.99, "ms": None}]
    assert result["noSummaries"] is None


def test_half_precision_and_bfloat16_bits(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [
            rng.normal(0, 100, 2000),
            rng.normal(0, 1e-5, 500),  # subnormal halves
            [0.0, -0.0, 1.0, 65504.0, 65520.0, 1e6, -1e6, 6e-8, 2.9e-8, 1 + 2**-11, 1 + 3 * 2**-11],
            [np.inf, -np.inf],
        ]
    ).astype(np.float32)
    result = run(
        tmp_path,
        "return {f16: data.map((v) => tensors.float16Bits(v)),"
        " bf16: data.map((v) => tensors.bfloat16Bits(v))};",
        [float(v) if np.isfinite(v) else None for v in values],
    )
    # (JSON has no infinities: those two come through as null → 0; compare the finite ones.)
    finite = np.isfinite(values)
    with np.errstate(over="ignore"):  # 1e6 overflows to infinity, in numpy as here
        halves = values[finite].astype(np.float16).view(np.uint16)
    assert np.array_equal(np.array(result["f16"])[finite], halves)
    assert np.array_equal(np.array(result["bf16"])[finite], float32_to_bf16(values[finite]))


def test_binary_encodings(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        const hex = (bytes) => Buffer.from(bytes).toString("hex");
        const int64 = tensors.parseValues(
          "[-9223372036854775808, 9223372036854775807, 1]", "INT64", "x", 3);
        const request = tensors.buildRequest(
          [
            { name: "a", datatype: "FP32", shape: [2], values: [1.5, -2] },
            { name: "b", datatype: "FP16", shape: [2], values: [1.5, -2] },
            { name: "c", datatype: "BYTES", shape: [2],
              bytes: tensors.encodeBinary(["hé", ""], "BYTES") },
          ],
          ["out"],
        );
        return {
          bytes: hex(tensors.encodeBinary(["hé", "", "xyz"], "BYTES")),
          int64: hex(tensors.encodeBinary(int64, "INT64")),
          uint16: hex(tensors.encodeBinary([1, 65535], "UINT16")),
          bool: hex(tensors.encodeBinary([true, false], "BOOL")),
          fp64: hex(tensors.encodeBinary([0.1], "FP64")),
          body: hex(request.body),
          headerLength: request.headerLength,
          header: request.header,
          plain: tensors.buildRequest(
            [{ name: "a", datatype: "INT64", shape: [1], values: [int64[1]] }], null).body,
        };
        """,
    )
    assert bytes.fromhex(result["bytes"]) == serialize_bytes(
        np.array([b"h\xc3\xa9", b"", b"xyz"], dtype=object)
    )
    big = np.array([-(2**63), 2**63 - 1, 1], dtype="<i8")
    assert bytes.fromhex(result["int64"]) == big.tobytes()
    assert bytes.fromhex(result["uint16"]) == np.array([1, 65535], "<u2").tobytes()
    assert bytes.fromhex(result["bool"]) == b"\x01\x00"
    assert bytes.fromhex(result["fp64"]) == np.array([0.1], "<f8").tobytes()
    body = bytes.fromhex(result["body"])
    header = json.loads(body[: result["headerLength"]])
    assert header["inputs"][0] == {"name": "a", "shape": [2], "datatype": "FP32", "data": [1.5, -2]}
    assert header["inputs"][1]["parameters"] == {"binary_data_size": 4}  # FP16 travels as binary
    assert header["outputs"] == [{"name": "out", "parameters": {"binary_data": False}}]
    tail = body[result["headerLength"] :]
    assert tail == np.array([1.5, -2], "<f2").tobytes() + serialize_bytes(
        np.array([b"h\xc3\xa9", b""], dtype=object)
    )
    # 64-bit integers beyond 2^53 stay exact in JSON.
    assert json.loads(result["plain"])["inputs"][0]["data"] == [2**63 - 1]


@pytest.mark.parametrize(
    ("text", "datatype", "count", "error"),
    [
        ("1 2 3", "FP32", 4, "3 values given, the shape needs 4"),
        ("[1, 2, 300]", "UINT8", 3, "300 is out of range for UINT8"),
        ("1.5", "INT32", 1, "INT32 values must be integers"),
        ("[1.5]", "INT64", 1, "INT64 values must be integers, got 1.5"),
        ('["a"]', "FP32", 1, "FP32 values must be numbers"),
        ("maybe", "BOOL", 1, "BOOL values must be true or false"),
        ("[1, 2", "FP32", 2, "not valid JSON"),
        ("nan", "FP32", 1, "must be finite numbers"),
    ],
)
def test_typed_values_are_checked(
    tmp_path: Path, text: str, datatype: str, count: int, error: str
) -> None:
    message = run(
        tmp_path,
        """
        try { tensors.parseValues(data.text, data.datatype, "INPUT0", data.count); return null; }
        catch (e) { return e.message; }
        """,
        {"text": text, "datatype": datatype, "count": count},
    )
    assert message is not None and error in message and "INPUT0" in message


def test_typed_values_parse(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        """
        return [
          tensors.parseValues("1, 2\\n3 4", "INT32", "x", 4),
          tensors.parseValues("[[1.5, 2], [3, 4]]", "FP32", "x", 4),
          tensors.parseValues("a b\\nc", "BYTES", "x", 2),
          tensors.parseValues("true 0 1 false", "BOOL", "x", 4),
          tensors.outputTable({shape: [2, 3], data: [1, 2, 3, 4, 5, 6]}),
          tensors.outputTable({shape: [2, 2, 2], data: [1, 2, 3, 4, 5, 6, 7, 8]}, 3),
        ];
        """,
    )
    assert result[0] == [1, 2, 3, 4]
    assert result[1] == [1.5, 2, 3, 4]
    assert result[2] == ["a b", "c"]
    assert result[3] == [True, False, True, False]
    assert result[4]["rows"] == [
        {"index": "[0]", "values": [1, 2, 3]},
        {"index": "[1]", "values": [4, 5, 6]},
    ]
    assert result[5]["total"] == 4 and result[5]["shown"] == 3
    assert result[5]["rows"][2] == {"index": "[1, 0]", "values": [5, 6]}
