"""``inference.GRPCInferenceService``: every RPC translated to one core call."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from ptserve.common.errors import ServerError, unsupported
from ptserve.core.server import InferenceServer
from ptserve.core.shared_memory import CUDA_SHM_UNSUPPORTED
from ptserve.core.trace_records import Incoming
from ptserve.frontends.forms import FormCache
from ptserve.frontends.grpc import convert, messages
from ptserve.frontends.grpc.status import api_group
from ptserve.frontends.repository_api import load_parameters, unload_dependents

log = logging.getLogger("ptserve.grpc")

SERVICE = "inference.GRPCInferenceService"
EMPTY_FINAL = "triton_enable_empty_final_response"
_END = object()  # closes the queue of stream replies
# Methods that take their request's bytes and return their response's: their handlers have no
# (de)serializer (``convert`` reads and writes ModelInfer's messages on the wire).
WIRE_METHODS = frozenset(("ModelInfer",))


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """Thin: decode, call the core, encode. A ServerError becomes its status code in the guard
    (``guard.guard_handler``)."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server
        self.tracer = server.tracer
        self.forms = FormCache()  # ModelInferRequest forms seen before

    # --- health and metadata ---------------------------------------------------------------

    @api_group("health")
    async def ServerLive(self, request: Any, context: Any) -> Any:
        return pb.ServerLiveResponse(live=self.server.live)

    @api_group("health")
    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=self.server.ready)

    @api_group("health")
    async def ModelReady(self, request: Any, context: Any) -> Any:
        ready = self.server.model_ready(request.name, request.version)
        return pb.ModelReadyResponse(ready=ready)

    @api_group("metadata")
    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return messages.server_metadata(self.server.metadata())

    @api_group("metadata")
    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        return messages.model_metadata(self.server.model_metadata(request.name, request.version))

    @api_group("model-config")
    async def ModelConfig(self, request: Any, context: Any) -> Any:
        config = self.server.model_version(request.name, request.version).config
        return pb.ModelConfigResponse(config=config)

    @api_group("statistics")
    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        return messages.model_statistics(self.server.statistics(request.name, request.version))

    # --- inference -------------------------------------------------------------------------

    async def _infer(self, request: Any, final: bool = False) -> Any:
        decoded = convert.decode_request(request, self.server.shared_memory, self.forms)
        response = await self.server.infer(decoded)
        return convert.encode_response(response, self.server.shared_memory, final)

    async def _infer_traced(
        self, request: Any, context: Any, method: str, final: bool = False
    ) -> Any:
        """``_infer`` (``convert.answer_wire`` for ModelInfer's bytes, see ``WIRE_METHODS``)
        with a server span (OpenTelemetry mode) that continues the client's trace when the
        call's metadata carries a W3C ``traceparent``."""
        incoming = _incoming(context, method, self.tracer.incoming)
        try:
            if isinstance(request, (bytes, memoryview)):
                message = await convert.answer_wire(request, self.server, self.forms)
            else:
                message = await self._infer(request, final)
        except BaseException as exc:
            code = exc.status.grpc_code_name if isinstance(exc, ServerError) else "INTERNAL"
            incoming.attributes["rpc.grpc.status_code"] = grpc.StatusCode[code].value[0]
            self.tracer.answered(incoming, exc)
            raise
        incoming.attributes["rpc.grpc.status_code"] = grpc.StatusCode.OK.value[0]
        self.tracer.answered(incoming)
        return message

    @api_group("inference")
    async def ModelInfer(self, request: bytes | memoryview, context: Any) -> Any:
        if self.tracer.otel is not None:  # OpenTelemetry: this call gets a server span
            return await self._infer_traced(request, context, "ModelInfer")
        return await convert.answer_wire(request, self.server, self.forms)

    @api_group("inference")
    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        """Requests of one stream run concurrently (each is queued as soon as it arrives, so
        their order into the scheduler is the stream's order); responses go back as they
        finish. A failed request answers with ``error_message`` and the stream stays open."""
        replies: asyncio.Queue[Any] = asyncio.Queue()
        pending: set[asyncio.Task[None]] = set()

        async def answer(request: Any) -> None:
            final = _wants_final_flag(request)
            try:
                if self.tracer.otel is not None:  # OpenTelemetry: a server span per message
                    message = await self._infer_traced(request, context, "ModelStreamInfer", final)
                else:
                    message = await self._infer(request, final)
                reply = pb.ModelStreamInferResponse(infer_response=message)
            except ServerError as exc:
                reply = _stream_error(request, exc.message)
            except Exception as exc:
                log.exception("stream request failed")
                reply = _stream_error(request, f"internal error: {exc!r}")
            replies.put_nowait(reply)

        async def read() -> None:
            try:
                async for request in request_iterator:
                    task = asyncio.create_task(answer(request))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                if pending:
                    await asyncio.gather(*pending)
            except Exception:
                # The incoming side failed (an unparsable message): the requests before it
                # are still answered, then the stream ends with the failure.
                if pending:
                    await asyncio.gather(*pending, return_exceptions=True)
                raise
            finally:
                replies.put_nowait(_END)

        reader = asyncio.create_task(read())
        try:
            while (reply := await replies.get()) is not _END:
                yield reply
            await reader  # surfaces a failure of the incoming side
        finally:
            reader.cancel()
            for task in list(pending):
                task.cancel()

    # --- repository ------------------------------------------------------------------------

    @api_group("model-repository")
    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        return messages.repository_index(self.server.repository_index(request.ready))

    @api_group("model-repository")
    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        parameters = convert.parameters_to_dict(request.parameters)
        config, files = load_parameters(parameters, files_as_base64=False)
        await self.server.load_model(request.model_name, config, files)
        return pb.RepositoryModelLoadResponse()

    @api_group("model-repository")
    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        dependents = unload_dependents(convert.parameters_to_dict(request.parameters))
        await self.server.unload_model(request.model_name, dependents)
        return pb.RepositoryModelUnloadResponse()

    # --- shared memory ---------------------------------------------------------------------

    @api_group("shared-memory")
    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        return messages.system_shm_status(self.server.shared_memory.status(request.name))

    @api_group("shared-memory")
    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        self.server.shared_memory.register(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @api_group("shared-memory")
    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        self.server.shared_memory.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @api_group("shared-memory")
    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        if request.name:
            raise unsupported(CUDA_SHM_UNSUPPORTED)
        return pb.CudaSharedMemoryStatusResponse()

    @api_group("shared-memory")
    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        raise unsupported(CUDA_SHM_UNSUPPORTED)

    @api_group("shared-memory")
    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        # Nothing can be registered, so unregistering (all, or a name) has nothing to do.
        return pb.CudaSharedMemoryUnregisterResponse()

    # --- settings --------------------------------------------------------------------------

    @api_group("trace")
    async def TraceSetting(self, request: Any, context: Any) -> Any:
        if request.settings:
            changes = messages.trace_settings_request(request.settings)
            settings = self.server.update_trace_settings(changes, request.model_name)
        else:
            settings = self.server.get_trace_settings(request.model_name)
        return messages.trace_settings_response(settings)

    @api_group("logging")
    async def LogSettings(self, request: Any, context: Any) -> Any:
        if request.settings:
            changes = messages.log_settings_request(request.settings)
            settings = self.server.update_log_settings(changes)
        else:
            settings = self.server.log_settings()
        return messages.log_settings_response(settings)


def _incoming(context: Any, method: str, start: Callable[..., Incoming]) -> Incoming:
    """The call as the server span of its trace sees it, with the client's trace context."""
    traceparent = tracestate = ""
    for key, value in context.invocation_metadata() or ():
        if key == "traceparent":
            traceparent = value if isinstance(value, str) else value.decode("latin-1")
        elif key == "tracestate":
            tracestate = value if isinstance(value, str) else value.decode("latin-1")
    return start(
        f"{SERVICE}/{method}",
        {"rpc.system": "grpc", "rpc.service": SERVICE, "rpc.method": method},
        traceparent,
        tracestate,
    )


def _wants_final_flag(request: Any) -> bool:
    param = request.parameters.get(EMPTY_FINAL)
    return bool(param is not None and param.bool_param)


def _stream_error(request: Any, message: str) -> Any:
    """An error reply that still names the request, so a client can match it."""
    reply = pb.ModelStreamInferResponse(error_message=message)
    reply.infer_response.id = request.id
    reply.infer_response.model_name = request.model_name
    reply.infer_response.model_version = request.model_version
    return reply
