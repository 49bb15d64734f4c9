"""ModelInferRequest ↔ the core's InferRequest / InferResponse.

Tensor bytes travel in ``raw_input_contents`` / ``raw_output_contents`` (decoded with the same
helpers as HTTP's binary extension) or in the typed ``contents`` lists; shared-memory tensors are
read and written through the core's registry.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from ptserve.common import datatypes
from ptserve.common.datatypes import DataType
from ptserve.common.errors import invalid_arg
from ptserve.common.requests import InferRequest, InferResponse, RequestedOutput, Tensor
from ptserve.core.server import InferenceServer
from ptserve.core.shared_memory import SharedMemoryRegistry
from ptserve.frontends import tensors
from ptserve.frontends.forms import FormCache, form_of, placement, requested_output

# Which typed ``contents`` list holds each datatype (FP16 and BF16 have none: raw only).
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}

FINAL_RESPONSE = "triton_final_response"


def parameters_to_dict(params: Mapping[str, Any]) -> dict[str, Any]:
    """InferParameter map → plain values, the types HTTP's JSON gives; ``triton_*`` dropped."""
    result: dict[str, Any] = {}
    for key, param in params.items():
        if key.startswith("triton_"):
            continue
        choice = param.WhichOneof("parameter_choice")
        result[key] = getattr(param, choice) if choice is not None else None
    return result


def set_parameter(target: Any, value: Any) -> None:
    """A plain value into an InferParameter; an integer no 64-bit member holds goes as text."""
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int) and -(2**63) <= value < 2**64:
        if value > 2**63 - 1:
            target.uint64_param = value
        else:
            target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = str(value)


_NO_OUTPUTS = ("*",)  # stands for "every output" in a form's key


def form_key(message: Any) -> Hashable | None:
    """What a request's form is kept under (see ``frontends.forms``): model, version, and the
    name, datatype and shape of each input and the name of each output. None when that would
    not describe the request: parameters other than the client's own ``triton_*`` ones, or an
    input with typed contents (its values are decoded every time anyway)."""
    if message.parameters and not all(key.startswith("triton_") for key in message.parameters):
        return None  # (``triton_*`` parameters are the client's own and are dropped)
    inputs = []
    for entry in message.inputs:
        if entry.parameters or entry.HasField("contents"):
            return None
        inputs.append((entry.name, entry.datatype, tuple(entry.shape)))
    outputs = []
    for entry in message.outputs:
        if entry.parameters:
            return None
        outputs.append(entry.name)
    return (
        message.model_name,
        message.model_version,
        tuple(inputs),
        tuple(outputs) if outputs else _NO_OUTPUTS,
    )


# --- ModelInfer on the wire ---------------------------------------------------------------
#
# A unary ModelInfer arrives as the bytes of its message. Its description (every field but
# ``id`` and ``raw_input_contents``) is the key of its form, as the exact JSON header bytes are
# for HTTP: a request of a form seen before is cut out of the bytes without parsing them into a
# message, and its response is written as bytes. Anything else (fields this version of the
# protocol lacks, a form not seen yet) takes the message path below, and a form is kept only
# for a request ``form_key`` would keep one for (no parameters but the client's ``triton_*``
# ones, which perf_analyzer sends with every request).

REQUEST_TYPE = "inference.ModelInferRequest"
# The tags of ModelInferRequest's fields, all length-delimited: field number << 3 | 2.
_TAG_ID = 0x1A
_TAG_RAW = 0x3A
# Model name, version, parameters, inputs, outputs.
_DESCRIPTION_TAGS = frozenset((0x0A, 0x12, 0x22, 0x2A, 0x32))


class WireRequest:
    """What varies between requests of one form, cut out of a ModelInferRequest's bytes."""

    def __init__(self, key: bytes, id: str, raw: list[memoryview]) -> None:
        self.key = key
        self.id = id
        self.raw = raw


def _varint(data: bytes | memoryview, position: int) -> tuple[int, int]:
    """The varint at ``position`` and where it ends; ValueError when it does not end."""
    result = 0
    shift = 0
    end = len(data)
    while position < end and shift < 64:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
    raise ValueError("truncated varint")


def split_request(data: bytes | memoryview) -> WireRequest | None:
    """The form key, id and raw inputs of a ModelInferRequest's bytes; None when the message
    has a field other than ModelInferRequest's, or is not well framed (the message path then
    parses it and says what is wrong)."""
    view = memoryview(data)
    description: list[bytes | memoryview] = []
    raw: list[memoryview] = []
    request_id: bytes | memoryview = b""
    position = 0
    end = len(data)
    try:
        while position < end:
            tag = data[position]
            length, start = _varint(data, position + 1)
            stop = start + length
            if stop > end:
                return None
            if tag == _TAG_RAW:
                raw.append(view[start:stop])
            elif tag == _TAG_ID:
                request_id = data[start:stop]
            elif tag in _DESCRIPTION_TAGS:
                description.append(data[position:stop])
            else:  # a field ModelInferRequest does not have
                return None
            position = stop
        return WireRequest(b"".join(description), str(request_id, "utf-8"), raw)
    except ValueError:  # a truncated varint, or an id that is not UTF-8
        return None


def parse_request(data: bytes | memoryview) -> Any:
    """A ModelInferRequest message; INVALID_ARGUMENT when the bytes are not one."""
    try:
        return pb.ModelInferRequest.FromString(data)
    except Exception as exc:  # protobuf's DecodeError
        raise invalid_arg(f"the request is not a valid {REQUEST_TYPE} message: {exc}") from None


def decode_wire_request(
    data: bytes | memoryview, registry: SharedMemoryRegistry, forms: FormCache
) -> InferRequest:
    """A unary ModelInfer's request from its bytes (see above); the errors ``decode_request``
    gives."""
    wire = split_request(data)
    if wire is not None:
        form = forms.get(wire.key)
        if form is not None and len(wire.raw) == len(form.inputs):
            return form.request(wire.raw, wire.id)
    message = parse_request(data)
    if wire is None or form_key(message) is None:
        return decode_request(message, registry, forms)
    request, raw_sizes = _decode(message, registry)
    form = form_of(request, raw_sizes)
    if form is not None:
        forms.put(wire.key, form)
    return request


def _put_varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_field(out: bytearray, tag: int, data: bytes | bytearray) -> None:
    """A length-delimited field; left out when empty, as proto3 leaves a default value out."""
    if not data:
        return
    out.append(tag)
    _put_varint(out, len(data))
    out += data


async def answer_wire(
    data: bytes | memoryview, server: InferenceServer, forms: FormCache
) -> list[bytes | bytearray | memoryview]:
    """A unary ModelInfer from the request's bytes to the response's, compiled with the
    conversions (the servicer's interpreted coroutine awaits it once)."""
    registry = server.shared_memory
    response = await server.infer(decode_wire_request(data, registry, forms))
    return encode_wire_response(response, registry)


# Raw contents up to this size are copied into the message's bytes (fewer, larger parts); larger
# ones stay parts of their own.
_INLINE_RAW = 4096


def encode_wire_response(
    response: InferResponse, registry: SharedMemoryRegistry
) -> list[bytes | bytearray | memoryview]:
    """The bytes of the ModelInferResponse ``encode_response`` makes, in parts whose
    concatenation is the message: the same fields, in field order, as protobuf writes them.
    Each output's raw contents is a part of its own, the output's own memory (as HTTP/1.1's
    binary outputs are), so the transport writes large tensor data without copying it."""
    if response.parameters:
        message = encode_response(response, registry)
        data: bytes = message.SerializeToString()
        return [data]
    out = bytearray()
    _put_field(out, 0x0A, response.model_name.encode())
    _put_field(out, 0x12, response.model_version.encode())
    _put_field(out, 0x1A, response.id.encode())
    requested = response.requested
    raws: list[bytes | memoryview] = []
    for tensor in response.outputs:
        entry = bytearray()
        _put_field(entry, 0x0A, tensor.name.encode())
        _put_field(entry, 0x12, tensor.datatype.name.encode())
        shape = bytearray()
        for dim in tensor.shape:
            _put_varint(shape, dim)  # (never negative)
        _put_field(entry, 0x1A, shape)
        _put_field(out, 0x2A, entry)
        raw = tensors.to_raw(tensor.data, tensor.datatype)
        wanted = requested.get(tensor.name)
        place = wanted.placement if wanted is not None else None
        if place is not None:
            registry.write(f"output '{tensor.name}'", place, raw)
            raw = b""
        raws.append(raw)
    parts: list[bytes | bytearray | memoryview] = []
    for raw in raws:
        out.append(0x32)  # raw_output_contents: every output has its entry, empty ones too
        _put_varint(out, len(raw))
        if len(raw) <= _INLINE_RAW:
            out += raw
            continue
        parts.append(out)  # (not written to again: the next part starts a new one)
        parts.append(raw)
        out = bytearray()
    if out or not parts:
        parts.append(out)
    return parts


def decode_request(
    message: Any, registry: SharedMemoryRegistry, forms: FormCache | None = None
) -> InferRequest:
    """Decode a ModelInferRequest; every client mistake is an INVALID_ARGUMENT with a message.
    With ``forms``, a request of a form seen before is not decoded again (see
    ``frontends.forms``)."""
    key = form_key(message) if forms is not None else None
    if key is not None and forms is not None:
        form = forms.get(key)
        raw = message.raw_input_contents
        if form is not None and len(raw) == len(form.inputs):
            return form.request(raw, message.id)
    request, raw_sizes = _decode(message, registry)
    if key is not None and forms is not None:
        form = form_of(request, raw_sizes)
        if form is not None:
            forms.put(key, form)
    return request


def _decode(message: Any, registry: SharedMemoryRegistry) -> tuple[InferRequest, list[int | None]]:
    """The request, and for each input how many raw bytes it was read from (None: typed
    contents or shared memory)."""
    raw = message.raw_input_contents
    if raw and any(i.HasField("contents") for i in message.inputs):
        raise invalid_arg(
            "contents field must not be specified when using raw_input_contents: send every "
            "input either raw or typed"
        )
    next_raw = 0
    model = message.model_name
    inputs: list[Tensor] = []
    raw_sizes: list[int | None] = []
    for position, entry in enumerate(message.inputs):
        name = entry.name
        if not name:
            raise invalid_arg(f"inputs[{position}] must have a non-empty name")
        dt = datatypes.from_name(entry.datatype)
        shape = tensors.check_shape(name, list(entry.shape))
        where = f"input '{name}'"
        params = parameters_to_dict(entry.parameters)
        place = placement(where, params)
        raw_size: int | None = None
        if place is not None:
            if entry.HasField("contents"):
                raise invalid_arg(f"{where} has both contents and a shared memory region")
            data = tensors.from_raw(name, registry.read(where, place), dt, shape, model)
        elif entry.HasField("contents"):
            data = from_contents(name, entry.contents, dt, shape)
        else:
            if next_raw >= len(raw):
                raise invalid_arg(
                    f"{where} has no data: expected raw_input_contents[{next_raw}], but the "
                    f"request carries {len(raw)} raw input(s)"
                )
            data = tensors.from_raw(name, raw[next_raw], dt, shape, model)
            raw_size = len(raw[next_raw])
            next_raw += 1
        inputs.append(Tensor(name, dt, data))
        raw_sizes.append(raw_size)
    if next_raw != len(raw):
        raise invalid_arg(
            f"the request carries {len(raw)} raw_input_contents but only {next_raw} input(s) "
            "take their data from them"
        )
    outputs: list[RequestedOutput] | None = None
    if message.outputs:
        outputs = [
            requested_output(o.name, parameters_to_dict(o.parameters), position)
            for position, o in enumerate(message.outputs)
        ]
    request = InferRequest(
        model_name=message.model_name,
        model_version=message.model_version,
        id=message.id,
        inputs=inputs,
        outputs=outputs,
        parameters=parameters_to_dict(message.parameters),
    )
    return request, raw_sizes


def from_contents(name: str, contents: Any, dt: DataType, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor from the typed lists; only the list of its datatype may hold values."""
    field = CONTENTS_FIELD.get(dt.name)
    if field is None:
        raise invalid_arg(
            f"input '{name}': {dt.name} data cannot travel in typed contents; send it in "
            "raw_input_contents"
        )
    stray = [f.name for f, _ in contents.ListFields() if f.name != field]
    if stray:
        raise invalid_arg(
            f"input '{name}': {dt.name} data belongs in contents.{field}, but "
            f"{', '.join(stray)} holds values"
        )
    values = getattr(contents, field)
    count = datatypes.element_count(shape)
    if len(values) != count:
        raise invalid_arg(
            f"input '{name}': contents.{field} has {len(values)} elements, but shape "
            f"{list(shape)} needs {count}"
        )
    if dt.is_bytes:
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    wide = np.array(values, dtype=_WIDE.get(dt.numpy.kind, dt.numpy))
    if dt.numpy.kind in "iu":
        tensors.check_integer_range(name, dt, wide)
    return wide.astype(dt.numpy, copy=False).reshape(shape)


_WIDE = {"i": np.dtype(np.int64), "u": np.dtype(np.uint64)}


def encode_response(
    response: InferResponse, registry: SharedMemoryRegistry, final_flag: bool = False
) -> Any:
    """A ModelInferResponse with one raw_output_contents entry per output (empty for outputs
    placed in shared memory), as clients index them by position."""
    message = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    for key, value in response.parameters.items():
        set_parameter(message.parameters[key], value)
    if final_flag:
        message.parameters[FINAL_RESPONSE].bool_param = True
    requested = response.requested
    raw_outputs: list[bytes] = []
    for tensor in response.outputs:
        entry = message.outputs.add()
        entry.name = tensor.name
        entry.datatype = tensor.datatype.name
        entry.shape.extend(tensor.shape)
        raw = tensors.to_raw(tensor.data, tensor.datatype)
        wanted = requested.get(tensor.name)
        place = wanted.placement if wanted is not None else None
        if place is not None:
            registry.write(f"output '{tensor.name}'", place, raw)
            raw_outputs.append(b"")
        else:
            raw_outputs.append(raw if isinstance(raw, bytes) else raw.tobytes())
    message.raw_output_contents.extend(raw_outputs)
    return message
