"""The v2 HTTP infer body: JSON header plus binary tensor data, in both directions."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import orjson

from ptserve.common import datatypes
from ptserve.common.errors import invalid_arg
from ptserve.common.memo import Memo
from ptserve.common.requests import InferRequest, InferResponse, RequestedOutput, Tensor
from ptserve.core.shared_memory import SharedMemoryRegistry, output_placements, placement
from ptserve.frontends import tensors

HEADER_LENGTH = "inference-header-content-length"


@dataclass(slots=True, frozen=True)
class _Template:
    """A decoded header: everything of the request but its binary data."""

    id: str
    parameters: dict[str, Any]
    inputs: tuple[tuple[str, datatypes.DataType, tuple[int, ...], int], ...]
    binary_size: int
    outputs: list[RequestedOutput] | None

    def request(
        self, model: str, version: str, binary: memoryview, signature: Hashable
    ) -> InferRequest:
        inputs: list[Tensor] = []
        offset = 0
        for name, dt, shape, size in self.inputs:
            data = tensors.from_raw(name, binary[offset : offset + size], dt, shape, model)
            inputs.append(Tensor(name, dt, data))
            offset += size
        return InferRequest(
            model_name=model,
            model_version=version,
            id=self.id,
            inputs=inputs,
            outputs=self.outputs,
            parameters=dict(self.parameters),
            signature=signature,
        )


# What earlier JSON headers decoded to, keyed by (model, version, the header's exact bytes).
# Clients send one header again and again with new binary data; a header seen before skips
# parsing and checking and only cuts the tensors out of the new data. Only headers whose inputs
# are all binary and that name no shared memory and no sequence are kept (those carry
# per-request values or depend on state that can change); the request carries the key as its
# ``signature`` so that the core can skip checking it against the model too.
HeaderKey = tuple[str, str, bytes]
CACHED_HEADER_MAX = 4096  # bytes; longer headers are rare and would make the cache large
HeaderCache = Memo[HeaderKey, _Template]


def _template(request: InferRequest, header: dict[str, Any]) -> _Template | None:
    """The request's template, when its header may be reused (see HeaderCache)."""
    if "sequence_id" in request.parameters:
        return None
    sizes: list[int] = []
    for raw in header["inputs"]:
        params = raw.get("parameters") or {}
        if "data" in raw or "binary_data_size" not in params or placement("", params) is not None:
            return None
        sizes.append(params["binary_data_size"])
    for output in request.outputs or ():
        if placement("", output.parameters) is not None:
            return None
    return _Template(
        request.id,
        dict(request.parameters),
        tuple(
            (t.name, t.datatype, t.shape, size)
            for t, size in zip(request.inputs, sizes, strict=True)
        ),
        sum(sizes),
        request.outputs,
    )


def decode_request(
    model: str,
    version: str,
    body: bytes | bytearray | memoryview,
    header_length: int | None,
    shared_memory: SharedMemoryRegistry | None = None,
    cache: HeaderCache | None = None,
) -> InferRequest:
    """Parse an infer body; ``header_length`` splits JSON from binary data when given.

    Inputs and outputs may name system shared-memory regions of ``shared_memory``. With a
    ``cache``, a header seen before is not parsed again.
    """
    view = memoryview(body)
    if header_length is None:
        header_length = len(view)
    if header_length < 0 or header_length > len(view):
        raise invalid_arg(
            f"Inference-Header-Content-Length is {header_length}, but the body has only "
            f"{len(view)} bytes"
        )
    key = None
    binary_follows = header_length < len(view)
    if cache is not None and binary_follows and header_length <= CACHED_HEADER_MAX:
        key = (model, version, bytes(view[:header_length]))
        template = cache.get(key)
        if template is not None and len(view) - header_length == template.binary_size:
            return template.request(model, version, view[header_length:], key)
        # (binary data of another size: the full decoder says which input it does not fit)
    request, header = _decode(model, version, view, header_length, shared_memory)
    if key is not None and cache is not None:
        template = _template(request, header)
        if template is not None:
            cache.put(key, template)
            request.signature = key
    return request


def _decode(
    model: str,
    version: str,
    view: memoryview,
    header_length: int,
    shared_memory: SharedMemoryRegistry | None,
) -> tuple[InferRequest, dict[str, Any]]:
    """The request, and the header's JSON it came from."""
    try:
        header = orjson.loads(view[:header_length])
    except orjson.JSONDecodeError as exc:
        raise invalid_arg(f"failed to parse the request JSON: {exc}") from None
    if not isinstance(header, dict):
        raise invalid_arg(f"the request JSON must be an object, got {type(header).__name__}")
    binary = view[header_length:]

    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise invalid_arg(f"'id' must be a string, got {type(request_id).__name__}")
    parameters = _parameters(header.get("parameters"), "request 'parameters'")
    raw_inputs = header.get("inputs")
    if not isinstance(raw_inputs, list):
        raise invalid_arg("the request must have an 'inputs' list")

    offset = 0
    inputs: list[Tensor] = []
    for position, raw in enumerate(raw_inputs):
        tensor, used = _decode_input(model, position, raw, binary, offset, shared_memory)
        offset += used
        inputs.append(tensor)
    if offset != len(binary):
        raise invalid_arg(
            f"the body has {len(binary)} bytes of binary data after the JSON header, but the "
            f"inputs' binary_data_size values add up to {offset}"
        )

    outputs: list[RequestedOutput] | None = None
    raw_outputs = header.get("outputs")
    if raw_outputs is not None:
        if not isinstance(raw_outputs, list):
            raise invalid_arg("'outputs' must be a list")
        outputs = [
            _decode_output(position, raw, shared_memory) for position, raw in enumerate(raw_outputs)
        ]
    request = InferRequest(
        model_name=model,
        model_version=version,
        id=request_id,
        inputs=inputs,
        outputs=outputs,
        parameters=parameters,
    )
    return request, header


def _parameters(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid_arg(f"{where} must be an object, got {type(value).__name__}")
    return value


def _decode_input(
    model: str,
    position: int,
    raw: Any,
    binary: memoryview,
    offset: int,
    shared_memory: SharedMemoryRegistry | None,
) -> tuple[Tensor, int]:
    if not isinstance(raw, dict):
        raise invalid_arg(f"inputs[{position}] must be an object, got {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise invalid_arg(f"inputs[{position}] must have a non-empty string 'name'")
    if "datatype" not in raw:
        raise invalid_arg(f"input '{name}' has no 'datatype'")
    dt = datatypes.from_name(raw["datatype"])
    if "shape" not in raw:
        raise invalid_arg(f"input '{name}' has no 'shape'")
    shape = tensors.check_shape(name, raw["shape"])
    params = _parameters(raw.get("parameters"), f"input '{name}' 'parameters'")
    place = placement(f"input '{name}'", params)
    if place is not None:
        if "data" in raw or "binary_data_size" in params:
            raise invalid_arg(
                f"input '{name}' names a shared memory region and also carries data; send one"
            )
        if shared_memory is None:
            raise invalid_arg(f"input '{name}': shared memory is not available here")
        data = tensors.from_raw(
            name, shared_memory.read(f"input '{name}'", place), dt, shape, model
        )
        return Tensor(name, dt, data), 0
    size = params.get("binary_data_size")
    if size is not None:
        if "data" in raw:
            raise invalid_arg(f"input '{name}' has both 'data' and binary_data_size; send one")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise invalid_arg(
                f"input '{name}': binary_data_size must be a non-negative integer, got {size!r}"
            )
        if offset + size > len(binary):
            raise invalid_arg(
                f"input '{name}': binary_data_size {size} overruns the body: only "
                f"{len(binary) - offset} bytes of binary data remain"
            )
        data = tensors.from_raw(name, binary[offset : offset + size], dt, shape, model)
        return Tensor(name, dt, data), size
    if "data" not in raw:
        raise invalid_arg(f"input '{name}' has neither 'data' nor parameters.binary_data_size")
    return Tensor(name, dt, tensors.from_json(name, raw["data"], dt, shape)), 0


def _decode_output(
    position: int, raw: Any, shared_memory: SharedMemoryRegistry | None
) -> RequestedOutput:
    if not isinstance(raw, dict):
        raise invalid_arg(f"outputs[{position}] must be an object, got {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise invalid_arg(f"outputs[{position}] must have a non-empty string 'name'")
    params = _parameters(raw.get("parameters"), f"output '{name}' 'parameters'")
    classification = params.get("classification", 0)
    if isinstance(classification, bool) or not isinstance(classification, int):
        raise invalid_arg(f"output '{name}': classification must be an integer")
    binary = params.get("binary_data")
    if binary is not None and not isinstance(binary, bool):
        raise invalid_arg(f"output '{name}': binary_data must be true or false")
    if placement(f"output '{name}'", params) is not None and shared_memory is None:
        raise invalid_arg(f"output '{name}': shared memory is not available here")
    return RequestedOutput(name, classification, params)


@dataclass(slots=True)
class EncodedResponse:
    """The JSON header and the binary parts that follow it."""

    header: bytes
    binary: list[bytes | memoryview]


def encode_response(
    response: InferResponse,
    binary_default: bool,
    shared_memory: SharedMemoryRegistry | None = None,
) -> EncodedResponse:
    """Serialize a response; outputs go binary when asked per output or for the whole request,
    and into shared memory when their request placed them there."""
    outputs: list[dict[str, Any]] = []
    binary: list[bytes | memoryview] = []
    places = output_placements(response) if shared_memory is not None else {}
    for tensor in response.outputs:
        wanted = response.requested.get(tensor.name)
        as_binary = binary_default
        if wanted is not None and "binary_data" in wanted.parameters:
            as_binary = bool(wanted.parameters["binary_data"])
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype.name,
            "shape": list(tensor.shape),
        }
        place = places.get(tensor.name)
        if place is not None and shared_memory is not None:
            raw = tensors.to_raw(tensor.data, tensor.datatype)
            shared_memory.write(f"output '{tensor.name}'", place, raw)
            entry["parameters"] = {
                "shared_memory_region": place.region,
                "shared_memory_byte_size": len(raw),
            }
            if place.offset:
                entry["parameters"]["shared_memory_offset"] = place.offset
        elif as_binary:
            raw = tensors.to_raw(tensor.data, tensor.datatype)
            entry["parameters"] = {"binary_data_size": len(raw)}
            binary.append(raw)
        else:
            entry["data"] = tensors.to_json_values(tensor.data, tensor.datatype)
        outputs.append(entry)
    header: dict[str, Any] = {}
    if response.id:
        header["id"] = response.id
    header["model_name"] = response.model_name
    header["model_version"] = response.model_version
    if response.parameters:
        header["parameters"] = response.parameters
    header["outputs"] = outputs
    return EncodedResponse(orjson.dumps(header), binary)
