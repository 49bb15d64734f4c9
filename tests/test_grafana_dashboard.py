"""deploy/grafana/ptserve.json: every metric it queries exists in the real server's /metrics, and
its panels are well formed."""

from __future__ import annotations

import inspect
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ptserve.core.metrics import Metrics
from tests.serverproc import ServerProcess

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "ptserve.json"
# Rendered only once the server uses a GPU (never initialised by the metrics themselves).
GPU_ONLY = {"nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes"}
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset",
}  # fmt: skip


def load() -> dict[str, Any]:
    value: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return value


def queries(dashboard: dict[str, Any]) -> list[str]:
    found = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["definition"])
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a label_values() query) reads."""
    names = set(re.findall(r"label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", expr))
    expr = re.sub(r"label_values\(\s*[^,]*,\s*\w+\s*\)", " ", expr)
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', " ", expr)  # strings
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # ranges
    expr = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", " ", expr)  # groupings
    for match in re.finditer(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?", expr):
        name, call = match.group(1), match.group(2)
        if not call and name not in PROMQL_WORDS:
            names.add(name)
    return names


def test_the_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, model) (rate(x_bucket{model=~"$m", le="1"}'
        "[$__rate_interval]))) / on (model) group_left sum without (version) (y_total) + z"
    )
    assert metric_names(expr) == {"x_bucket", "y_total", "z"}
    assert metric_names('label_values(nv_a{instance=~"$i"}, model)') == {"nv_a"}


@pytest.fixture(scope="module")
def metrics_text(example_repository: Path) -> str:
    args = [
        "--metrics-config",
        "summary_latencies=true",
        "--metrics-config",
        "histogram_latencies=true",
    ]
    with ServerProcess([example_repository], args) as server:
        url = f"http://{server.metrics_url}/metrics"
        with urllib.request.urlopen(url, timeout=30) as reply:
            text = reply.read().decode()
    return text


def test_every_queried_metric_exists(metrics_text: str) -> None:
    exposed = {
        line.split("{")[0].split(" ")[0]
        for line in metrics_text.splitlines()
        if line and not line.startswith("#")
    }
    wanted = set().union(*(metric_names(q) for q in queries(load())))
    assert {"nv_inference_request_success", "nv_inference_request_summary_us"} <= wanted
    assert "nv_inference_first_response_histogram_ms_bucket" in wanted
    missing = wanted - exposed
    gpu_used = "nv_gpu_memory_used_bytes" in exposed
    if not gpu_used:
        # No GPU here: those names must still be what the server writes when it has one.
        source = inspect.getsource(Metrics._gpu)
        for name in missing & GPU_ONLY:
            assert f'"{name}"' in source or f"{name}{{" in source, name
        missing -= GPU_ONLY
    assert not missing, f"the dashboard queries metrics /metrics does not have: {sorted(missing)}"


def test_panels_are_well_formed() -> None:
    dashboard = load()
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] and dashboard["title"]
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "model", "instance"} <= variables
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
