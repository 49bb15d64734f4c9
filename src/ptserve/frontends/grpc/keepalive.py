"""The reference server's gRPC keepalive flags, as grpcio channel arguments.

They configure the ``aio`` transport exactly as the reference configures its gRPC server (the
same defaults: a client that pings an idle connection more often than every five minutes is
told ``too_many_pings`` and disconnected). The native transport answers pings within its own
flood budget and ignores these settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Keepalive:
    """Milliseconds and counts, named as the reference's ``--grpc-*`` flags."""

    time_ms: int = 7_200_000  # --grpc-keepalive-time: the server's own pings
    timeout_ms: int = 20_000  # --grpc-keepalive-timeout: how long a ping may go unanswered
    permit_without_calls: bool = False  # --grpc-keepalive-permit-without-calls
    max_pings_without_data: int = 2  # --grpc-http2-max-pings-without-data
    min_recv_ping_interval_without_data_ms: int = 300_000
    max_ping_strikes: int = 2  # --grpc-http2-max-ping-strikes
    max_connection_age_ms: int = 0  # --grpc-max-connection-age (0: unlimited)
    max_connection_age_grace_ms: int = 0  # --grpc-max-connection-age-grace (0: unlimited)

    def options(self) -> list[tuple[str, Any]]:
        options: list[tuple[str, Any]] = [
            ("grpc.keepalive_time_ms", self.time_ms),
            ("grpc.keepalive_timeout_ms", self.timeout_ms),
            ("grpc.keepalive_permit_without_calls", int(self.permit_without_calls)),
            ("grpc.http2.max_pings_without_data", self.max_pings_without_data),
            (
                "grpc.http2.min_ping_interval_without_data_ms",
                self.min_recv_ping_interval_without_data_ms,
            ),
            ("grpc.http2.max_ping_strikes", self.max_ping_strikes),
        ]
        if self.max_connection_age_ms:
            options.append(("grpc.max_connection_age_ms", self.max_connection_age_ms))
        if self.max_connection_age_grace_ms:
            options.append(("grpc.max_connection_age_grace_ms", self.max_connection_age_grace_ms))
        return options
