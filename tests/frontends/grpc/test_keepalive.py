"""The reference's gRPC keepalive flags reach grpcio as its channel arguments."""

from __future__ import annotations

from ptserve.cli import build_parser
from ptserve.frontends.grpc.keepalive import Keepalive


def test_the_defaults_are_the_reference_servers() -> None:
    options = dict(Keepalive().options())
    assert options["grpc.keepalive_time_ms"] == 7_200_000
    assert options["grpc.keepalive_timeout_ms"] == 20_000
    assert options["grpc.keepalive_permit_without_calls"] == 0
    assert options["grpc.http2.max_pings_without_data"] == 2
    assert options["grpc.http2.min_ping_interval_without_data_ms"] == 300_000
    assert options["grpc.http2.max_ping_strikes"] == 2
    assert "grpc.max_connection_age_ms" not in options  # unlimited unless set


def test_the_flags_parse_as_the_reference_names_them() -> None:
    args = build_parser().parse_args(
        [
            "--model-repository",
            "/tmp",
            "--grpc-keepalive-time=1000",
            "--grpc-keepalive-permit-without-calls=true",
            "--grpc-http2-min-recv-ping-interval-without-data=500",
            "--grpc-http2-max-ping-strikes=0",
            "--grpc-max-connection-age=60000",
        ]
    )
    assert args.grpc_keepalive_time == 1000
    assert args.grpc_keepalive_permit_without_calls is True
    assert args.grpc_http2_min_recv_ping_interval_without_data == 500
    assert args.grpc_http2_max_ping_strikes == 0
    assert dict(Keepalive(max_connection_age_ms=60000).options())["grpc.max_connection_age_ms"]
