"""``ptserve``: the server's command line, with the reference server's flag names."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from ptserve import __version__, logging_setup
from ptserve.core.server import InferenceServer, ServerOptions
from ptserve.frontends.http import DEFAULT_MAX_INPUT_SIZE, start_http_server

log = logging.getLogger("ptserve.cli")


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "on", "1", "yes"):
        return True
    if lowered in ("false", "off", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{value}'")


def _backend_config(value: str) -> tuple[str, str, str]:
    backend, sep, setting = value.partition(",")
    key, eq, item = setting.partition("=")
    if not sep or not eq or not backend or not key:
        raise argparse.ArgumentTypeError(
            "expected <backend>,<key>=<value> (e.g. pytorch,INTRA_OP_THREAD_COUNT=4), "
            f"got '{value}'"
        )
    return backend, key, item


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
        "--exit-timeout-secs",
        type=int,
        default=30,
        help="seconds to let in-flight requests finish on shutdown (default 30)",
    )

    logs = parser.add_argument_group("Logging")
    logs.add_argument("--log-verbose", type=int, default=0, metavar="N", help="verbose level")
    logs.add_argument("--log-info", default=True, **bool_flag, help="log info messages")
    logs.add_argument("--log-warning", default=True, **bool_flag, help="log warnings")
    logs.add_argument("--log-error", default=True, **bool_flag, help="log errors")
    logs.add_argument("--log-format", choices=["default", "ISO8601"], default="default")

    models = parser.add_argument_group("Model repository")
    models.add_argument(
        "--model-repository",
        "--model-store",
        action="append",
        required=True,
        type=Path,
        dest="model_repository",
        help="path of a model repository (repeatable)",
    )
    models.add_argument(
        "--strict-model-config",
        default=False,
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
    models.add_argument(
        "--backend-config",
        action="append",
        type=_backend_config,
        default=[],
        metavar="BACKEND,KEY=VALUE",
        help="a backend setting, e.g. pytorch,INTRA_OP_THREAD_COUNT=4",
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

    grpc = parser.add_argument_group("GRPC")
    grpc.add_argument("--allow-grpc", default=True, **bool_flag)
    grpc.add_argument("--grpc-port", type=int, default=8001)
    grpc.add_argument("--grpc-address", default="0.0.0.0")

    metrics = parser.add_argument_group("Metrics")
    metrics.add_argument("--allow-metrics", default=True, **bool_flag)
    metrics.add_argument("--metrics-port", type=int, default=8002)
    metrics.add_argument("--metrics-address", default="0.0.0.0")
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

    server = InferenceServer(options_from_args(args))
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
        http = await start_http_server(
            server, args.http_address, args.http_port, args.http_max_input_size
        )
        listeners.append(http)
        log.info("Started HTTPService at %s:%d", args.http_address, args.http_port)
    await stop.wait()
    log.info("shutting down")
    for listener in listeners:
        listener.close()
    await server.shutdown(args.exit_timeout_secs)
    log.info("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging_setup.configure(args.log_verbose, args.log_format, bool(args.log_info))
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
