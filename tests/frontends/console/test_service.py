"""The console's read-only routes in process, for the settings a server process would need a
start of its own to show: other control modes, metrics off."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from ptserve.core.metrics import Metrics, MetricsConfig
from ptserve.core.server import InferenceServer, ServerOptions
from ptserve.frontends.console.service import METRICS_OFF, Console


@pytest.mark.parametrize(
    ("mode", "allowed", "words"),
    [
        ("none", False, "--model-control-mode=none"),
        ("poll", False, "--model-control-mode=poll"),
        ("explicit", True, ""),
    ],
)
def test_info_says_whether_load_and_unload_work(mode: str, allowed: bool, words: str) -> None:
    server = InferenceServer(ServerOptions(model_control_mode=mode, repository_poll_secs=3.0))
    info = orjson.loads(Console(server, None).info().body[0])
    assert info["model_control_mode"] == mode
    assert info["load_unload"] is allowed
    assert words in info["load_unload_reason"]
    assert bool(info["load_unload_reason"]) is not allowed
    assert info["metrics"] is False
    assert ("repository_poll_secs" in info) is (mode == "poll")


def test_metrics_off() -> None:
    console = Console(InferenceServer(ServerOptions()), None)
    response = asyncio.run(console.metrics_text())
    assert response.status == 404
    assert orjson.loads(response.body[0]) == {"error": METRICS_OFF}


def test_the_console_does_not_shorten_a_scrapers_cpu_window() -> None:
    """Each reader's nv_cpu_utilization spans the time since its own previous read."""
    metrics = Metrics(InferenceServer(ServerOptions()), MetricsConfig())
    metrics.render()
    metrics.render("http")
    assert set(metrics._cpu_last) == {"", "http"}
    before = metrics._cpu_last[""]
    for _ in range(3):
        metrics.render("http")
    assert metrics._cpu_last[""] == before
