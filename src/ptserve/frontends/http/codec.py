"""The v2 HTTP infer body: JSON header plus binary tensor data, in both directions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ptserve.common import datatypes
from ptserve.common.device import to_host
from ptserve.common.errors import invalid_arg
from ptserve.common.requests import InferRequest, InferResponse, RequestedOutput, Tensor
from ptserve.core.shared_memory import SharedMemoryRegistry
from ptserve.frontends import tensors
from ptserve.frontends.forms import FormCache, form_of, placement, requested_output

HEADER_LENGTH = "inference-header-content-length"


# Forms of earlier requests, keyed by (model, version, the JSON header's exact bytes): a request
# whose header was seen before only has its tensors cut out of its new binary data (see
# ``frontends.forms`` for which requests leave a form).
HeaderKey = tuple[str, str, bytes]
CACHED_HEADER_MAX = 4096  # bytes; longer headers are rare and would make the cache large
HeaderCache = FormCache


def decode_request(
    model: str,
    version: str,
    body: bytes | bytearray | memoryview,
    header_length: int | None,
    shared_memory: SharedMemoryRegistry | None = None,
    forms: HeaderCache | None = None,
) -> InferRequest:
    """Parse an infer body; ``header_length`` splits JSON from binary data when given.

    Inputs and outputs may name system shared-memory regions of ``shared_memory``. With
    ``forms``, a header seen before is not parsed again.
    """
    view = memoryview(body)
    if header_length is None:
        header_length = len(view)
    if header_length < 0 or header_length > len(view):
        raise invalid_arg(
            f"Inference-Header-Content-Length is {header_length}, but the body has only "
            f"{len(view)} bytes"
        )
    key: HeaderKey | None = None
    if forms is not None and header_length <= CACHED_HEADER_MAX:
        key = (model, version, bytes(view[:header_length]))
        form = forms.get(key)
        if form is not None and len(view) - header_length == form.byte_size:
            payloads = []
            offset = header_length
            for input_form in form.inputs:
                payloads.append(view[offset : offset + input_form.byte_size])
                offset += input_form.byte_size
            return form.request(payloads)
        # (binary data of another size: the full decoder says which input it does not fit)
    request, raw_sizes = _decode(model, version, view, header_length, shared_memory)
    if key is not None and forms is not None:
        form = form_of(request, raw_sizes)
        if form is not None:
            forms.put(key, form)
    return request


def _decode(
    model: str,
    version: str,
    view: memoryview,
    header_length: int,
    shared_memory: SharedMemoryRegistry | None,
) -> tuple[InferRequest, list[int | None]]:
    """The request, and for each input the size of the binary data it was read from (None for
    JSON data and shared memory)."""
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
    raw_sizes: list[int | None] = []
    for position, raw in enumerate(raw_inputs):
        tensor, used = _decode_input(model, position, raw, binary, offset, shared_memory)
        offset += used or 0
        inputs.append(tensor)
        raw_sizes.append(used)
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
        outputs = [_decode_output(position, raw) for position, raw in enumerate(raw_outputs)]
    request = InferRequest(
        model_name=model,
        model_version=version,
        id=request_id,
        inputs=inputs,
        outputs=outputs,
        parameters=parameters,
    )
    return request, raw_sizes


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
) -> tuple[Tensor, int | None]:
    """The tensor, and how many binary bytes it took (None: its data was not binary)."""
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
        return Tensor(name, dt, data), None
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
    return Tensor(name, dt, tensors.from_json(name, raw["data"], dt, shape)), None


def _decode_output(position: int, raw: Any) -> RequestedOutput:
    if not isinstance(raw, dict):
        raise invalid_arg(f"outputs[{position}] must be an object, got {type(raw).__name__}")
    name = raw.get("name")
    params = _parameters(raw.get("parameters"), f"output '{name}' 'parameters'")
    return requested_output(name, params, position)


@dataclass(slots=True)
class EncodedResponse:
    """The JSON header and the binary parts that follow it."""

    header: bytes
    binary: list[bytes | memoryview]

    def __init__(self, header: bytes, binary: list[bytes | memoryview]) -> None:
        self.header = header
        self.binary = binary


def encode_response(
    response: InferResponse,
    binary_default: bool,
    shared_memory: SharedMemoryRegistry | None = None,
) -> EncodedResponse:
    """Serialize a response; outputs go binary when asked per output or for the whole request,
    and into shared memory when their request placed them there."""
    outputs: list[dict[str, Any]] = []
    binary: list[bytes | memoryview] = []
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
        place = wanted.placement if wanted is not None else None
        if place is not None:
            if shared_memory is None:
                raise invalid_arg(f"output '{tensor.name}': shared memory is not available here")
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
            entry["data"] = tensors.to_json_values(to_host(tensor.data), tensor.datatype)
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
