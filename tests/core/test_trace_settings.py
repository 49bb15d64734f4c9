"""``--trace-config`` items → the trace settings and the OpenTelemetry exporter's, with each
mistake named."""

from __future__ import annotations

import pytest

from ptserve.common.errors import ServerError
from ptserve.core.trace_settings import OtelSettings, parse_config, parse_config_item


def parse(*items: str) -> tuple[dict[str, object], OtelSettings]:
    changes, otel = parse_config([parse_config_item(item) for item in items])
    return dict(changes), otel


def test_items_become_settings_and_exporter_settings() -> None:
    changes, otel = parse(
        "mode=opentelemetry",
        "level=TIMESTAMPS",
        "triton,level=TENSORS",
        "rate=5",
        "opentelemetry,url=https://collector:4318/v1/traces",
        "opentelemetry,resource=deployment.environment=prod",
        "opentelemetry,resource=team = ml",
        "opentelemetry,bsp_max_queue_size=100",
        "opentelemetry,bsp_max_export_batch_size=10",
        "opentelemetry,bsp_schedule_delay=250",
    )
    assert changes == {
        "trace_mode": "opentelemetry",
        "trace_level": ["TIMESTAMPS", "TENSORS"],
        "trace_rate": "5",
    }
    assert otel == OtelSettings(
        url="https://collector:4318/v1/traces",
        resource=(("deployment.environment", "prod"), ("team", "ml")),
        bsp_max_queue_size=100,
        bsp_schedule_delay=250,
        bsp_max_export_batch_size=10,
    )


def test_defaults_and_the_reference_s_url_without_a_scheme() -> None:
    assert parse()[1] == OtelSettings(url="http://localhost:4318/v1/traces")
    assert parse("opentelemetry,url=collector:4318/v1/traces")[1].url == (
        "http://collector:4318/v1/traces"
    )


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["opentelemetry,url=ftp://collector"], "got 'ftp://collector'"),
        (["opentelemetry,url=collector:port/v1/traces"], "and a port number"),
        (["opentelemetry,bsp_max_queue_size=0"], "'bsp_max_queue_size' must be a positive"),
        (["opentelemetry,bsp_schedule_delay=1.5"], "got '1.5'"),
        (["opentelemetry,resource=novalue"], "'resource' must be <key>=<value>"),
        (["opentelemetry,colour=blue"], "got 'opentelemetry,colour=blue'"),
        (["jaeger,rate=1"], "got 'jaeger,rate=1'"),
        (["rate=often"], "'trace_rate' must be an integer, got 'often'"),
        (["mode=zipkin"], "trace_mode 'zipkin' is not one of"),
        (
            ["opentelemetry,bsp_max_queue_size=10", "opentelemetry,bsp_max_export_batch_size=20"],
            "'bsp_max_export_batch_size' (20) must not exceed 'bsp_max_queue_size' (10)",
        ),
    ],
)
def test_mistakes_are_named(items: list[str], message: str) -> None:
    with pytest.raises(ServerError) as caught:
        parse(*items)
    assert message in caught.value.message
    assert caught.value.status.name == "INVALID_ARGUMENT"
