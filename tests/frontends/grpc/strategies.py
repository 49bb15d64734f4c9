"""Hypothesis strategies for hostile ``ModelInferRequest`` messages, and the property every one
must satisfy; shared by the property tests and ``benchmarks/fuzz_parsers.py``."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from ptserve.common import datatypes
from ptserve.common.errors import ServerError, Status
from ptserve.core.shared_memory import SharedMemoryRegistry
from ptserve.frontends.grpc import convert
from tests.frontends.elements import comparable

# What a client may be told; INTERNAL (a bug of ours) or any other exception fails the property.
CLIENT_ERRORS = {Status.INVALID_ARGUMENT, Status.UNSUPPORTED, Status.NOT_FOUND}

REGION, REGION_BYTES = "r0", 64

INT64 = st.integers(-(2**63), 2**63 - 1)
UINT64 = st.integers(0, 2**64 - 1)

parameter_values = st.one_of(
    st.booleans(),
    INT64,
    UINT64,
    st.floats(),
    st.text(max_size=6),
    st.sampled_from([REGION, "missing"]),
)


PARAMETER_KEYS = [
    "classification",
    "binary_data_size",
    "priority",
    "timeout",
    "sequence_id",
    "triton_enable_empty_final_response",
    "other",
]
# Mostly harmless keys; now and then a shared-memory key with a value of any type.
parameters = st.dictionaries(
    st.sampled_from(PARAMETER_KEYS * 6 + ["shared_memory_region", "shared_memory_byte_size"]),
    parameter_values,
    max_size=3,
)

CONTENTS_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "bool_contents": st.booleans(),
    "int_contents": st.integers(-(2**31), 2**31 - 1),
    "int64_contents": INT64,
    "uint_contents": st.integers(0, 2**32 - 1),
    "uint64_contents": UINT64,
    "fp32_contents": st.floats(width=32),
    "fp64_contents": st.floats(),
    "bytes_contents": st.binary(max_size=8),
}

contents = st.dictionaries(
    st.sampled_from(sorted(CONTENTS_VALUES)), st.just(None), min_size=1, max_size=2
).flatmap(
    lambda fields: st.fixed_dictionaries(
        {name: st.lists(CONTENTS_VALUES[name], max_size=6) for name in fields}
    )
)

shapes = st.one_of(
    st.lists(st.integers(0, 4), max_size=3),
    st.lists(st.integers(-2, 4), max_size=3),
    st.lists(INT64, max_size=3),
    # A zero next to huge dimensions: no elements, yet more than numpy can address.
    st.lists(st.sampled_from([0, 1, 2**31, 2**62, 2**63 - 1]), min_size=2, max_size=3),
)
names = st.sampled_from(["INPUT0", "INPUT1"] * 5 + [""])
datatype_names = st.sampled_from([*datatypes.BY_NAME, *datatypes.BY_NAME, "INT33", "", "fp32"])
SOURCES = ("raw", "contents", "shared_memory", "none")


def _off_by(draw: st.DrawFn, size: int) -> int:
    """Mostly ``size``; sometimes a little more or less."""
    return max(0, size + draw(st.sampled_from([0, 0, 0, -1, 1, -4, 4])))


@st.composite
def bytes_buffers(draw: st.DrawFn, count: int) -> bytes:
    """``count`` length-prefixed BYTES elements (or a few more or less) whose prefixes may lie
    about what follows, perhaps with trailing bytes."""
    parts = []
    for _ in range(min(_off_by(draw, count), 16)):
        payload = draw(st.binary(max_size=6))
        claimed = draw(st.sampled_from([len(payload)] * 6 + [len(payload) + 1, 2**32 - 1]))
        parts.append(struct.pack("<I", claimed) + payload)
    return b"".join(parts) + draw(st.sampled_from([b"", b"", b"", b"\x01", b"\x00\x00"]))


@st.composite
def raw_data(draw: st.DrawFn, datatype: str, shape: list[int]) -> bytes:
    """Raw bytes for a tensor: sized right for it, or off by a little."""
    count = max(0, datatypes.element_count(shape))
    if datatype == "BYTES":
        return draw(bytes_buffers(min(count, 16)))
    dt = datatypes.BY_NAME.get(datatype)
    size = _off_by(draw, min(count * (dt.itemsize if dt else 4), 256))
    return draw(st.binary(min_size=size, max_size=size))


@st.composite
def typed_contents(draw: st.DrawFn, datatype: str, shape: list[int]) -> dict[str, list[Any]]:
    """Values in the contents list of the datatype (or another list), the right number of
    them or not."""
    right = convert.CONTENTS_FIELD.get(datatype, "fp32_contents")
    fields = draw(st.sampled_from([[right]] * 4 + [[right, "bytes_contents"], ["int64_contents"]]))
    count = min(_off_by(draw, max(0, datatypes.element_count(shape))), 32)
    return {f: draw(st.lists(CONTENTS_VALUES[f], min_size=count, max_size=count)) for f in fields}


@st.composite
def shm_parameters(draw: st.DrawFn, datatype: str, shape: list[int]) -> dict[str, Any]:
    """A placement in the test region: fitting, overrunning it, or naming another region."""
    dt = datatypes.BY_NAME.get(datatype)
    size = _off_by(draw, max(0, datatypes.element_count(shape)) * (dt.itemsize if dt else 4))
    params: dict[str, Any] = {
        "shared_memory_region": draw(st.sampled_from([REGION] * 4 + ["missing", ""])),
        "shared_memory_byte_size": draw(st.sampled_from([size] * 4 + [-1, REGION_BYTES + 1])),
    }
    if draw(st.booleans()):
        params["shared_memory_offset"] = draw(st.sampled_from([0, 1, REGION_BYTES, -3, 2**63]))
    return params


@st.composite
def input_tensors(draw: st.DrawFn, source: str) -> tuple[Any, bytes | None]:
    """One InferInputTensor taking its data from ``source``, and the raw bytes it would carry."""
    datatype = draw(datatype_names)
    shape = draw(shapes)
    tensor = pb.ModelInferRequest.InferInputTensor(name=draw(names), datatype=datatype)
    tensor.shape.extend(shape)
    params = draw(parameters)
    if source == "shared_memory":
        params.update(draw(shm_parameters(datatype, shape)))
    for key, value in params.items():
        convert.set_parameter(tensor.parameters[key], value)
    if source == "contents":
        for field, values in draw(typed_contents(datatype, shape)).items():
            getattr(tensor.contents, field).extend(values)
    return tensor, draw(raw_data(datatype, shape)) if source == "raw" else None


@st.composite
def infer_requests(draw: st.DrawFn) -> Any:
    """A ModelInferRequest built from hostile parts: mostly one data source for every input
    (so that decoding gets deep), sometimes a mixture."""
    message = pb.ModelInferRequest(
        model_name=draw(st.sampled_from(["simple", "", "x" * 3])),
        model_version=draw(st.sampled_from(["", "1", "-1"])),
        id=draw(st.text(max_size=4)),
    )
    common = draw(st.sampled_from(["raw", "raw", "contents", "contents", *SOURCES]))
    sources = st.sampled_from([common] * 6 + list(SOURCES))
    raws: list[bytes] = []
    for _ in range(draw(st.sampled_from([0, 1, 1, 2, 2, 3]))):
        tensor, raw = draw(input_tensors(draw(sources)))
        message.inputs.append(tensor)
        if raw is not None:
            raws.append(raw)
    extra = draw(st.sampled_from([0] * 6 + [1, -1]))
    if extra > 0:
        raws.append(draw(st.binary(max_size=16)))
    elif extra < 0:
        raws = raws[:-1]
    message.raw_input_contents.extend(raws)
    for _ in range(draw(st.integers(0, 2))):
        output = message.outputs.add(name=draw(st.sampled_from(["OUTPUT0", "OUTPUT1"] * 4 + [""])))
        for key, value in draw(parameters).items():
            convert.set_parameter(output.parameters[key], value)
    for key, value in draw(parameters).items():
        convert.set_parameter(message.parameters[key], value)
    return message


def shm_registry(directory: Path) -> SharedMemoryRegistry:
    """A registry with one region of REGION_BYTES bytes, kept in ``directory``."""
    (directory / "fuzz-region").write_bytes(bytes(range(REGION_BYTES)))
    registry = SharedMemoryRegistry(True, root=directory)
    registry.register(REGION, "fuzz-region", 0, REGION_BYTES)
    return registry


def check_decode(message: Any, registry: SharedMemoryRegistry) -> bool:
    """The property: a request whose tensors match their shapes, or a client error with a
    message; with the form cache, the second decoding (a cache hit when the form was kept) ends
    the same way as the first and as one without the cache. Returns whether it was accepted."""
    forms = convert.FormCache()
    outcomes = [_decode_once(message, registry, forms) for _ in range(2)]
    outcomes.append(_decode_once(message, registry, None))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    return not isinstance(outcomes[0], str)


def _decode_once(
    message: Any, registry: SharedMemoryRegistry, forms: convert.FormCache | None
) -> object:
    try:
        request = convert.decode_request(message, registry, forms)
    except ServerError as exc:
        assert exc.status in CLIENT_ERRORS, exc
        assert exc.message
        return exc.message
    assert len(request.inputs) == len(message.inputs)
    for tensor, entry in zip(request.inputs, message.inputs, strict=True):
        assert tensor.name == entry.name
        assert tensor.datatype.name == entry.datatype
        assert isinstance(tensor.data, np.ndarray)
        assert tensor.data.shape == tuple(entry.shape)
        assert tensor.data.dtype == tensor.datatype.numpy
    tensors = [(t.name, t.datatype.name, t.data.shape, comparable(t.data)) for t in request.inputs]
    # Parameters by their repr: a NaN parameter equals itself there.
    outputs = [(o.name, o.classification, repr(o.parameters)) for o in request.outputs or ()]
    return (request.model_name, request.model_version, request.id, tensors, outputs)
