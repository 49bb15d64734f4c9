"""``ptserve``: the server's command line, with the reference server's flag names."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from ptserve.common import logging_setup
from ptserve.common.errors import ServerError
from ptserve.common.host_memory import retain_freed_memory
from ptserve.common.loops import DEFAULT_IDLE_POLL_US, MAX_IDLE_POLL_US
from ptserve.common.version import __version__
from ptserve.core import collector
from ptserve.core.control import CONTROL_MODES
from ptserve.core.metrics import Metrics, MetricsConfig
from ptserve.core.server import InferenceServer, ServerOptions
from ptserve.core.trace_settings import parse_config_item
from ptserve.frontends.grpc.guard import parse_protocol_restriction
from ptserve.frontends.grpc.keepalive import Keepalive
from ptserve.frontends.grpc.server import TRANSPORTS
from ptserve.frontends.http.server import DEFAULT_MAX_INPUT_SIZE
from ptserve.frontends.listeners import GrpcSettings, HttpSettings, start_grpc, start_http
from ptserve.frontends.metrics import start_metrics_server
from ptserve.frontends.restrictions import parse_restriction
from ptserve.repository import RepositoryOptions, check_location
from ptserve.repository.layout import is_safe_name
from ptserve.repository.remote import is_remote
from ptserve.transports.http1 import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS

log = logging.getLogger("ptserve.cli")


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "on", "1", "yes"):
        return True
    if lowered in ("false", "off", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{value}'")


def _at_least(kind: type[int] | type[float], minimum: int) -> Any:
    """An argparse type: a number of ``kind`` no smaller than ``minimum``."""
    what = "a whole number" if kind is int else "a number"

    def parse(value: str) -> int | float:
        try:
            number = kind(value)
        except ValueError:
            number = minimum - 1
        if number < minimum:
            raise argparse.ArgumentTypeError(
                f"expected {what} of at least {minimum}, got '{value}'"
            )
        return number

    return parse


def _backend_config(value: str) -> tuple[str, str, str]:
    """``<backend>,<key>=<value>``, or ``<key>=<value>``: a default for every backend."""
    backend, sep, setting = value.partition(",")
    if not sep and "=" in value:
        backend, setting = "", value
    key, eq, item = setting.partition("=")
    if not eq or not key or (sep and not backend):
        raise argparse.ArgumentTypeError(
            "expected <backend>,<key>=<value> (e.g. pytorch,INTRA_OP_THREAD_COUNT=4) or "
            f"<key>=<value> for every backend, got '{value}'"
        )
    return backend, key, item


def _trace_config(value: str) -> tuple[str, str]:
    """``[<mode>,]<key>=<value>`` of ``--trace-config`` → (trace setting, value), checked."""
    try:
        return parse_config_item(value)
    except ServerError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _repository(value: str) -> str | Path:
    """A local path, or an object store URL checked here (form, client library)."""
    if not is_remote(value):
        return Path(value)
    try:
        check_location(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _model_name(value: str) -> str:
    if not is_safe_name(value):
        raise argparse.ArgumentTypeError(
            f"expected a model name without '/', '\\' or NUL (not '.' or '..'), got '{value}'"
        )
    return value


def _restriction(value: str) -> Any:
    try:
        return parse_restriction(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _protocol_restriction(value: str) -> Any:
    try:
        return parse_protocol_restriction(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _tls_files(args: argparse.Namespace, prefix: str) -> tuple[str, str, str] | None:
    """(certificate, key, client CA or "") from a frontend's TLS flags; None without TLS."""
    flags = vars(args)
    mutual = flags[f"{prefix}_use_ssl_mutual"]
    if not (flags[f"{prefix}_use_ssl"] or mutual):
        return None
    cert, key, root = (
        flags[f"{prefix}_{name}"] for name in ("server_cert", "server_key", "root_cert")
    )
    if not cert or not key:
        raise SystemExit(
            f"--{prefix}-use-ssl needs --{prefix}-server-cert and --{prefix}-server-key"
        )
    if mutual and not root:
        raise SystemExit(f"--{prefix}-use-ssl-mutual needs --{prefix}-root-cert")
    return cert, key, root if mutual else ""


def _http_settings(args: argparse.Namespace) -> HttpSettings:
    """The HTTP listener's settings from the ``--http-*`` flags."""
    return HttpSettings(
        address=args.http_address,
        port=args.http_port,
        max_input_size=args.http_max_input_size,
        restricted_api=list(args.http_restricted_api),
        tls=_tls_files(args, "http"),
        read_timeout=args.http_read_timeout_secs,
        idle_timeout=args.http_idle_timeout_secs,
        max_connections=args.http_max_connections,
        console=bool(args.allow_console),
    )


def _grpc_settings(args: argparse.Namespace) -> GrpcSettings:
    """The gRPC listener's settings from the ``--grpc-*`` flags."""
    return GrpcSettings(
        address=args.grpc_address,
        port=args.grpc_port,
        restricted_protocol=list(args.grpc_restricted_protocol),
        tls=_tls_files(args, "grpc"),
        transport=args.grpc_transport,
        keepalive=Keepalive(
            args.grpc_keepalive_time,
            args.grpc_keepalive_timeout,
            args.grpc_keepalive_permit_without_calls,
            args.grpc_http2_max_pings_without_data,
            args.grpc_http2_min_recv_ping_interval_without_data,
            args.grpc_http2_max_ping_strikes,
            args.grpc_max_connection_age,
            args.grpc_max_connection_age_grace,
        ),
    )


def _add_tls_flags(
    group: argparse._ArgumentGroup, prefix: str, what: str, bool_flag: dict[str, Any]
) -> None:
    """The reference's TLS flags, named alike for HTTP and gRPC."""
    group.add_argument(f"--{prefix}-use-ssl", default=False, **bool_flag, help=f"serve {what}")
    group.add_argument(f"--{prefix}-server-cert", default="", help=f"PEM certificate for {what}")
    group.add_argument(f"--{prefix}-server-key", default="", help=f"PEM private key for {what}")
    group.add_argument(f"--{prefix}-root-cert", default="", help="PEM CA that signs client certs")
    group.add_argument(
        f"--{prefix}-use-ssl-mutual",
        default=False,
        **bool_flag,
        help=f"require client certificates signed by --{prefix}-root-cert",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ptserve",
        description="Serve PyTorch models from a Triton-style model repository over the "
        "KServe v2 protocols.",
    )
    parser.add_argument("--version", action="version", version=f"ptserve {__version__}")
    bool_flag: dict[str, Any] = {"type": _bool, "nargs": "?", "const": True, "metavar": "BOOL"}

    server = parser.add_argument_group("Server")
    server.add_argument("--id", default="ptserve", help="identifier of this server")
    server.add_argument(
        "--allow-client-shm",
        default=False,
        **bool_flag,
        help="let clients register system shared memory regions for tensors (default false)",
    )
    server.add_argument(
        "--exit-timeout-secs",
        type=int,
        default=30,
        help="seconds to let in-flight requests finish on shutdown (default 30)",
    )

    server.add_argument(
        "--retain-host-memory",
        default=True,
        **bool_flag,
        help="keep freed host memory for the next execution instead of returning it to the "
        "system: faster large tensors, resident memory stays at its peak (default true)",
    )

    logs = parser.add_argument_group("Logging")
    logs.add_argument("--log-verbose", type=int, default=0, metavar="N", help="verbose level")
    logs.add_argument("--log-info", default=True, **bool_flag, help="log info messages")
    logs.add_argument("--log-warning", default=True, **bool_flag, help="log warnings")
    logs.add_argument("--log-error", default=True, **bool_flag, help="log errors")
    logs.add_argument(
        "--log-format",
        choices=logging_setup.LOG_FORMATS,
        default="default",
        help="default: the reference's lines; ISO8601: the same with ISO 8601 times; json: one "
        "JSON object per line (time, level, logger, file, message, and the model, version and "
        "request id of lines about requests)",
    )

    models = parser.add_argument_group("Model Repository")
    models.add_argument(
        "--model-repository",
        "--model-store",
        action="append",
        required=True,
        type=_repository,
        dest="model_repository",
        metavar="PATH_OR_URL",
        help="a model repository (repeatable): a local folder, or s3://bucket/path, "
        "s3://host:port/bucket/path (plain HTTP) or s3://https://host:port/bucket/path; a path "
        "may also be one model's own folder (KServe's /mnt/models)",
    )
    models.add_argument(
        "--model-name",
        type=_model_name,
        default=None,
        help="the name of the model when a repository path is one model's own folder "
        "(default: the name its config gives, else the folder's name)",
    )
    models.add_argument(
        "--repository-cache-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where object store repositories are copied and kept between restarts (default: "
        "$TRITON_AWS_MOUNT_DIRECTORY for s3://, else a temporary folder removed at exit)",
    )
    models.add_argument(
        "--model-control-mode",
        choices=CONTROL_MODES,
        default="none",
        help="none: load every model at start; poll: also apply repository changes; "
        "explicit: load --load-model at start, then only what the repository API asks",
    )
    models.add_argument(
        "--model-load-thread-count",
        type=_at_least(int, 1),
        default=4,
        metavar="N",
        help="models loaded at the same time (default 4)",
    )
    models.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="a model to load at start in explicit mode (repeatable; '*' loads all)",
    )
    models.add_argument(
        "--repository-poll-secs",
        type=float,
        default=15.0,
        help="seconds between repository scans in poll mode (default 15)",
    )
    parser.add_argument(
        "--idle-poll-us",
        type=int,
        default=DEFAULT_IDLE_POLL_US,
        metavar="US",
        help="after the last request in flight is answered, the event loop keeps polling its "
        "connections for this long before it sleeps, so that a client's next request is read "
        "without a wake-up from idle (lower latency for clients that send one request after "
        "another, at the cost of up to this much CPU time per burst); 0 turns it off "
        f"(default {DEFAULT_IDLE_POLL_US})",
    )
    models.add_argument(
        "--strict-model-config",
        default=None,  # None: not given (only a given value draws the deprecation warning)
        **bool_flag,
        help="require complete config.pbtxt files (no auto-complete)",
    )
    models.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="same as --strict-model-config=true",
    )
    models.add_argument(
        "--model-config-name",
        default="",
        help="use <model>/configs/<name>.pbtxt when it exists instead of config.pbtxt",
    )
    models.add_argument(
        "--exit-on-error",
        default=True,
        **bool_flag,
        help="exit when a model fails to load at startup (default true)",
    )
    models.add_argument(
        "--strict-readiness",
        default=True,
        **bool_flag,
        help="ready only when every model is ready (default true)",
    )
    backends = parser.add_argument_group("Backend")
    backends.add_argument(
        "--backend-config",
        action="append",
        type=_backend_config,
        default=[],
        metavar="[BACKEND,]KEY=VALUE",
        help="a backend setting, e.g. pytorch,INTRA_OP_THREAD_COUNT=4; without a backend "
        "name, a default for every backend",
    )

    http = parser.add_argument_group("HTTP")
    http.add_argument("--allow-http", default=True, **bool_flag)
    http.add_argument("--http-port", type=int, default=8000)
    http.add_argument("--http-address", default="0.0.0.0")
    http.add_argument(
        "--http-max-input-size",
        type=int,
        default=DEFAULT_MAX_INPUT_SIZE,
        help="largest request body accepted, after decompression (bytes, default 64 MB)",
    )
    http.add_argument(
        "--http-read-timeout-secs",
        type=float,
        default=60.0,
        help="answer 408 and close when a request takes longer to arrive (0: no limit)",
    )
    http.add_argument(
        "--http-idle-timeout-secs",
        type=_at_least(float, 0),
        default=DEFAULT_IDLE_TIMEOUT,
        help="close a keep-alive connection idle this long between requests (default "
        f"{DEFAULT_IDLE_TIMEOUT:g}: longer than load balancers' usual 60 s; 0: never)",
    )
    http.add_argument(
        "--http-max-connections",
        type=_at_least(int, 0),
        default=DEFAULT_MAX_CONNECTIONS,
        help="open HTTP connections accepted at once; one more is answered 503 and closed "
        f"(default {DEFAULT_MAX_CONNECTIONS}; 0: no limit)",
    )
    http.add_argument(
        "--http-restricted-api",
        action="append",
        type=_restriction,
        default=[],
        metavar="API[,API...]:HEADER=VALUE",
        help="answer 403 for these API groups unless HEADER equals VALUE (repeatable)",
    )
    http.add_argument(
        "--allow-console",
        default=True,
        **bool_flag,
        help="serve the web console at /console, with GET /v2/metrics (the metrics as "
        "Prometheus text) and GET /v2/server/info for it (default true)",
    )
    _add_tls_flags(http, "http", "HTTPS", bool_flag)

    grpc = parser.add_argument_group("GRPC")
    grpc.add_argument("--allow-grpc", default=True, **bool_flag)
    grpc.add_argument("--grpc-port", type=int, default=8001)
    grpc.add_argument("--grpc-address", default="0.0.0.0")
    grpc.add_argument(
        "--grpc-restricted-protocol",
        action="append",
        type=_protocol_restriction,
        default=[],
        metavar="PROTOCOL[,PROTOCOL...]:KEY=VALUE",
        help="answer PERMISSION_DENIED for these protocol groups unless the call carries "
        "metadata triton-grpc-protocol-KEY equal to VALUE (repeatable)",
    )
    grpc.add_argument(
        "--grpc-transport",
        choices=TRANSPORTS,
        default="native",
        help="native: HTTP/2 served on the event loop with the rest of the server (default); "
        "aio: grpcio's own server, which polls connections on threads of its own",
    )
    keepalive = Keepalive()
    for flag, default, what in (
        ("--grpc-keepalive-time", keepalive.time_ms, "ms between the server's keepalive pings"),
        ("--grpc-keepalive-timeout", keepalive.timeout_ms, "ms a keepalive ping may go unanswered"),
        (
            "--grpc-http2-max-pings-without-data",
            keepalive.max_pings_without_data,
            "pings the server sends without data before it must wait",
        ),
        (
            "--grpc-http2-min-recv-ping-interval-without-data",
            keepalive.min_recv_ping_interval_without_data_ms,
            "ms a client must leave between pings without data (else a strike)",
        ),
        (
            "--grpc-http2-max-ping-strikes",
            keepalive.max_ping_strikes,
            "strikes before too_many_pings closes the connection (0: unlimited)",
        ),
        ("--grpc-max-connection-age", 0, "ms a connection may live (0: unlimited)"),
        ("--grpc-max-connection-age-grace", 0, "ms its calls get after that (0: unlimited)"),
    ):
        grpc.add_argument(
            flag,
            type=_at_least(int, 0),
            default=default,
            help=f"{what} (default {default}; --grpc-transport=aio, as the reference)",
        )
    grpc.add_argument(
        "--grpc-keepalive-permit-without-calls",
        default=keepalive.permit_without_calls,
        help="allow keepalive pings on connections without calls (--grpc-transport=aio)",
        **bool_flag,
    )
    _add_tls_flags(grpc, "grpc", "gRPC TLS", bool_flag)

    metrics = parser.add_argument_group("Metrics")
    metrics.add_argument("--allow-metrics", default=True, **bool_flag)
    metrics.add_argument("--metrics-port", type=int, default=8002)
    metrics.add_argument("--metrics-address", default="0.0.0.0")
    metrics.add_argument(
        "--metrics-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="counter_latencies, summary_latencies, summary_quantiles=<q>:<err>,..., "
        "histogram_latencies (repeatable)",
    )
    metrics.add_argument("--allow-cpu-metrics", default=True, **bool_flag)
    metrics.add_argument("--allow-gpu-metrics", default=True, **bool_flag)

    tracing = parser.add_argument_group("Tracing")
    tracing.add_argument(
        "--trace-config",
        action="append",
        type=_trace_config,
        default=[],
        metavar="[MODE,]KEY=VALUE",
        help="initial trace settings (repeatable): level=OFF|TIMESTAMPS, rate=<n>, count=<n>, "
        "mode=triton|opentelemetry; triton mode: file=<path>, log-frequency=<n>; "
        "opentelemetry mode: opentelemetry,url=<OTLP/HTTP traces URL> (default "
        "http://localhost:4318/v1/traces), opentelemetry,resource=<key>=<value>, "
        "opentelemetry,bsp_max_queue_size=<n>, opentelemetry,bsp_schedule_delay=<ms>, "
        "opentelemetry,bsp_max_export_batch_size=<n>",
    )
    return parser


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    backend_config: dict[str, dict[str, str]] = {}
    for backend, key, value in args.backend_config:
        backend_config.setdefault(backend, {})[key] = value
    return ServerOptions(
        model_repositories=list(args.model_repository),
        strict_model_config=bool(args.strict_model_config or args.disable_auto_complete_config),
        model_config_name=args.model_config_name,
        exit_on_error=bool(args.exit_on_error),
        strict_readiness=bool(args.strict_readiness),
        backend_config=backend_config,
        server_id=args.id,
        allow_client_shm=bool(args.allow_client_shm),
        model_control_mode=args.model_control_mode,
        load_models=list(args.load_model),
        load_threads=args.model_load_thread_count,
        repository_poll_secs=args.repository_poll_secs,
        idle_poll_us=args.idle_poll_us,
        repository_options=RepositoryOptions(args.repository_cache_dir, args.model_name or ""),
    )


def _status_table(server: InferenceServer) -> str:
    rows = [("Model", "Version", "Status")]
    for name in sorted(server.manager.models):
        model = server.manager.models[name]
        if not model.versions:
            rows.append((name, "-", f"UNAVAILABLE: {model.reason}"))
        for number, version in sorted(model.versions.items()):
            status = version.state.value
            if version.reason and not version.ready:
                status += f": {version.reason}"
            rows.append((name, str(number), status))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [rule]
    for index, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if index == 0:
            lines.append(rule)
    lines.append(rule)
    return "\n".join(lines)


async def serve(args: argparse.Namespace) -> int:
    """Load the models, open the endpoints, and run until SIGINT or SIGTERM."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    try:
        server = InferenceServer(options_from_args(args))
    except ValueError as exc:  # a repository that cannot be opened (e.g. its cache folder)
        log.error("%s", exc)
        return 2
    if args.trace_config:
        try:
            server.configure_traces(list(args.trace_config))
        except ServerError as exc:
            log.error("--trace-config: %s", exc.message)
            return 2
    # Made before the models load, so that their latencies are observed from the start.
    metrics = Metrics(server, args.metrics_settings) if args.allow_metrics else None
    collector.enable()  # each load and unload settles the heap (see core.collector)
    failures = await server.start()
    log.info("\n%s", _status_table(server))
    if failures and server.options.exit_on_error:
        log.error(
            "exiting: %d model(s) failed to load (--exit-on-error=false serves the rest)",
            len(failures),
        )
        await server.shutdown(args.exit_timeout_secs)
        return 1

    listeners: list[asyncio.Server] = []
    if args.allow_http:
        try:
            http = await start_http(server, _http_settings(args), metrics)
        except ValueError as exc:  # restrictions that contradict each other
            log.error("--http-restricted-api: %s", exc)
            await server.shutdown(args.exit_timeout_secs)
            return 2
        listeners.append(http)
        log.info("Started HTTPService at %s:%d", args.http_address, args.http_port)
    grpc_server: Any = None
    if args.allow_grpc:
        try:
            grpc_server = await start_grpc(server, _grpc_settings(args))
        except (OSError, ValueError) as exc:
            log.error("%s", exc)
            for listener in listeners:
                listener.close()
            await server.shutdown(args.exit_timeout_secs)
            return 1
        log.info("Started GRPCInferenceService at %s:%d", args.grpc_address, args.grpc_port)
    if metrics is not None:
        listeners.append(
            await start_metrics_server(metrics, args.metrics_address, args.metrics_port)
        )
        log.info("Started Metrics Service at %s:%d", args.metrics_address, args.metrics_port)
    await stop.wait()
    # Readiness turns false and new requests are refused at once; the listeners stay open so
    # that requests in flight get their answers and load balancers see the server draining.
    log.info("shutting down: waiting up to %d s for requests in flight", args.exit_timeout_secs)
    await server.shutdown(args.exit_timeout_secs)
    for listener in listeners:
        listener.close()
    if grpc_server is not None:
        # In-flight calls have their results by now; open streams get a moment, then end.
        await grpc_server.stop(1.0)
    log.info("stopped")
    return 0


def _warn_strict_model_config(args: argparse.Namespace) -> None:
    """The reference's warnings for the deprecated ``--strict-model-config``."""
    if args.strict_model_config is None:
        return
    log.warning(
        "Warning: '--strict-model-config' has been deprecated! Please use "
        "'--disable-auto-complete-config' instead."
    )
    if args.disable_auto_complete_config and not args.strict_model_config:
        log.warning(
            "Warning: Overriding deprecated '--strict-model-config' from False to True in favor "
            "of '--disable-auto-complete-config'!"
        )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.load_model and args.model_control_mode != "explicit":
        parser.error("--load-model is only allowed with --model-control-mode=explicit")
    if args.repository_poll_secs <= 0:
        parser.error("--repository-poll-secs must be > 0")
    if not 0 <= args.idle_poll_us <= MAX_IDLE_POLL_US:
        parser.error(f"--idle-poll-us must be between 0 and {MAX_IDLE_POLL_US}")
    try:
        args.metrics_settings = MetricsConfig.parse(args.metrics_config)
    except ValueError as exc:
        parser.error(f"--metrics-config: {exc}")
    args.metrics_settings.cpu_metrics = bool(args.allow_cpu_metrics)
    args.metrics_settings.gpu_metrics = bool(args.allow_gpu_metrics)
    logging_setup.configure(
        args.log_verbose,
        args.log_format,
        bool(args.log_info),
        bool(args.log_warning),
        bool(args.log_error),
    )
    _warn_strict_model_config(args)
    if args.retain_host_memory:
        retain_freed_memory()
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        return int(runner(serve(args)))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
