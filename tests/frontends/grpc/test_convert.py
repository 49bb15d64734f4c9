"""ModelInferRequest forms: a request of a known form is cut out of its new data, keyed by the
message's description (the rule of which requests leave a form is ``frontends.forms``')."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from ptserve.common.errors import ServerError
from ptserve.core.shared_memory import SharedMemoryRegistry
from ptserve.frontends.forms import FormCache
from ptserve.frontends.grpc import convert


@pytest.fixture()
def registry() -> SharedMemoryRegistry:
    return SharedMemoryRegistry(False)


def _message(values: list[int], request_id: str = "", output: str = "OUTPUT0") -> Any:
    message = pb.ModelInferRequest(model_name="m", model_version="1", id=request_id)
    message.inputs.add(name="INPUT0", datatype="INT32", shape=[1, len(values)])
    message.outputs.add(name=output)
    message.raw_input_contents.append(np.array(values, np.int32).tobytes())
    return message


def test_a_known_form_takes_new_data_and_ids(registry: SharedMemoryRegistry) -> None:
    forms = FormCache()
    first = convert.decode_request(_message([1, 2, 3], "a"), registry, forms)
    key = convert.form_key(_message([1, 2, 3], "a"))
    assert forms.get(key) is not None
    assert first.id == "a"
    second = convert.decode_request(_message([4, 5, 6], "b"), registry, forms)
    assert len(forms) == 1
    assert second.id == "b"
    assert second.inputs[0].data.tolist() == [[4, 5, 6]]
    assert [o.name for o in second.outputs or ()] == ["OUTPUT0"]
    assert second.parameters == {}


def test_the_clients_own_parameters_do_not_prevent_a_form(registry: SharedMemoryRegistry) -> None:
    """perf_analyzer and tritonclient's streams send triton_enable_empty_final_response."""
    forms = FormCache()
    for values in ([1, 2, 3], [4, 5, 6]):
        message = _message(values)
        message.parameters["triton_enable_empty_final_response"].bool_param = True
        request = convert.decode_request(message, registry, forms)
        assert request.parameters == {}
        assert request.inputs[0].data.tolist() == [values]
    assert len(forms) == 1


def test_forms_differ_by_shape_and_outputs(registry: SharedMemoryRegistry) -> None:
    forms = FormCache()
    convert.decode_request(_message([1, 2, 3]), registry, forms)
    longer = convert.decode_request(_message([1, 2, 3, 4]), registry, forms)
    other_output = convert.decode_request(_message([1, 2, 3], output="OUTPUT1"), registry, forms)
    assert len(forms) == 3
    assert longer.inputs[0].data.shape == (1, 4)
    assert [o.name for o in other_output.outputs or ()] == ["OUTPUT1"]


def test_data_that_does_not_fit_a_known_form_is_refused(registry: SharedMemoryRegistry) -> None:
    forms = FormCache()
    convert.decode_request(_message([1, 2, 3]), registry, forms)
    short = _message([1, 2, 3])
    short.raw_input_contents[0] = b"\x00" * 8
    with pytest.raises(ServerError, match="input byte size mismatch for input 'INPUT0'"):
        convert.decode_request(short, registry, forms)


@pytest.mark.parametrize("where", ["request", "input", "output", "contents"])
def test_requests_with_parameters_or_typed_contents_have_no_form(
    where: str, registry: SharedMemoryRegistry
) -> None:
    """Parameters carry per-request values (sequences, priorities, shared memory)."""
    message = _message([1, 2, 3])
    if where == "request":
        message.parameters["priority"].int64_param = 1
    elif where == "input":
        message.inputs[0].parameters["x"].string_param = "y"
    elif where == "output":
        message.outputs[0].parameters["classification"].int64_param = 2
    else:
        message.ClearField("raw_input_contents")
        message.inputs[0].contents.int_contents.extend([1, 2, 3])
    assert convert.form_key(message) is None
    forms = FormCache()
    convert.decode_request(message, registry, forms)
    assert len(forms) == 0


def test_refused_requests_are_not_kept(registry: SharedMemoryRegistry) -> None:
    forms = FormCache()
    bad = _message([1, 2, 3])
    bad.inputs[0].datatype = "NOPE"
    for _ in range(2):
        with pytest.raises(ServerError, match="NOPE"):
            convert.decode_request(bad, registry, forms)
    assert len(forms) == 0


# --- unary ModelInfer on the wire ------------------------------------------------------------


def _same_request(left: Any, right: Any) -> None:
    assert (left.model_name, left.model_version, left.id) == (
        right.model_name,
        right.model_version,
        right.id,
    )
    assert [(t.name, t.datatype, t.data.tolist()) for t in left.inputs] == [
        (t.name, t.datatype, t.data.tolist()) for t in right.inputs
    ]
    assert [(o.name, o.classification) for o in left.outputs or ()] == [
        (o.name, o.classification) for o in right.outputs or ()
    ]
    assert left.parameters == right.parameters


def test_the_wire_key_is_the_message_without_its_id_and_data() -> None:
    message = _message([1, 2, 3], "req-é")
    wire = convert.split_request(message.SerializeToString())
    assert wire is not None
    description = pb.ModelInferRequest()
    description.CopyFrom(message)
    description.ClearField("id")
    description.ClearField("raw_input_contents")
    assert wire.key == description.SerializeToString()
    assert wire.id == "req-é"
    assert [bytes(raw) for raw in wire.raw] == list(message.raw_input_contents)


@pytest.mark.parametrize(
    "data",
    [
        b"\x40\x01",  # a field ModelInferRequest lacks, as a varint
        b"\x0a\x01m\x42\x00",  # one it lacks, length-delimited
    ],
)
def test_bytes_outside_the_wire_forms_take_the_message_path(data: bytes) -> None:
    assert convert.split_request(data) is None


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05ab",  # a length beyond the end
        b"\x0a\xff",  # a truncated varint length
        b"\x1a\x02\xff\xfe",  # an id that is not UTF-8
    ],
)
@pytest.mark.parametrize("view", [False, True], ids=["bytes", "view"])
def test_bytes_that_are_no_message_are_refused(
    data: bytes, view: bool, registry: SharedMemoryRegistry
) -> None:
    given = memoryview(bytearray(data)) if view else data  # the native transport gives a view
    assert convert.split_request(given) is None
    with pytest.raises(ServerError, match=r"not a valid inference\.ModelInferRequest message"):
        convert.decode_wire_request(given, registry, FormCache())


def test_a_wire_forms_tensors_are_the_calls_own_bytes(registry: SharedMemoryRegistry) -> None:
    """Given a view of the call's buffer (as the native transport gives one), a request of a
    known form reads its tensors in place: writable, so the backend takes them without a copy."""
    forms = FormCache()
    for values, request_id in (([1, 2, 3], "first"), ([4, 5, 6], "req-é")):
        buffer = bytearray(_message(values, request_id).SerializeToString())
        request = convert.decode_wire_request(memoryview(buffer), registry, forms)
        data = request.inputs[0].data
        assert data.tolist() == [values]
        assert request.id == request_id
    assert data.flags.writeable
    assert np.shares_memory(data, np.frombuffer(buffer, np.uint8))


def test_a_known_wire_form_takes_new_data_and_ids(registry: SharedMemoryRegistry) -> None:
    forms = FormCache()
    for values, request_id in (([1, 2, 3], "a"), ([4, 5, 6], "b"), ([7, 8, 9], "")):
        message = _message(values, request_id)
        request = convert.decode_wire_request(message.SerializeToString(), registry, forms)
        _same_request(request, convert.decode_request(message, registry))
        assert request.inputs[0].data.tolist() == [values]
    assert len(forms) == 1


def test_the_clients_own_parameters_do_not_prevent_a_wire_form(
    registry: SharedMemoryRegistry,
) -> None:
    """perf_analyzer sends triton_enable_empty_final_response with every ModelInfer."""
    forms = FormCache()
    for values in ([1, 2, 3], [4, 5, 6]):
        message = _message(values)
        message.parameters["triton_enable_empty_final_response"].bool_param = True
        data = message.SerializeToString()
        wire = convert.split_request(data)
        assert wire is not None
        if values == [4, 5, 6]:
            assert forms.get(wire.key) is not None  # the second one is cut out of its bytes
        request = convert.decode_wire_request(data, registry, forms)
        assert request.parameters == {}
        assert request.inputs[0].data.tolist() == [values]
    assert len(forms) == 1


def test_wire_requests_with_parameters_decode_as_messages(registry: SharedMemoryRegistry) -> None:
    forms = FormCache()
    for values in ([1, 2, 3], [4, 5, 6]):
        message = _message(values)
        message.parameters["priority"].int64_param = 2
        request = convert.decode_wire_request(message.SerializeToString(), registry, forms)
        assert request.parameters == {"priority": 2}
        assert request.inputs[0].data.tolist() == [values]
    assert len(forms) == 0


def test_a_wire_form_is_not_kept_for_a_refused_request(registry: SharedMemoryRegistry) -> None:
    forms = FormCache()
    bad = _message([1, 2, 3])
    bad.inputs[0].datatype = "NOPE"
    for _ in range(2):
        with pytest.raises(ServerError, match="NOPE"):
            convert.decode_wire_request(bad.SerializeToString(), registry, forms)
    assert len(forms) == 0
    short = _message([1, 2, 3])
    convert.decode_wire_request(short.SerializeToString(), registry, forms)
    short.raw_input_contents[0] = b"\x00" * 8
    with pytest.raises(ServerError, match="input byte size mismatch for input 'INPUT0'"):
        convert.decode_wire_request(short.SerializeToString(), registry, forms)


def _response(request_id: str = "", parameters: dict[str, Any] | None = None) -> Any:
    from ptserve.common import datatypes
    from ptserve.common.requests import InferResponse, Tensor

    words = np.array([b"a", b"", b"long" * 40], dtype=object).reshape(1, 3)
    return InferResponse(
        "model",
        "3",
        request_id,
        [
            Tensor("OUT_F", datatypes.from_name("FP32"), np.arange(300, dtype=np.float32)),
            Tensor("OUT_S", datatypes.from_name("BYTES"), words),
            Tensor("OUT_E", datatypes.from_name("INT64"), np.zeros((0, 2), np.int64)),
        ],
        parameters=parameters,
    )


@pytest.mark.parametrize("request_id", ["", "id-1"])
def test_the_wire_response_is_the_bytes_protobuf_writes(
    request_id: str, registry: SharedMemoryRegistry
) -> None:
    response = _response(request_id)
    expected = convert.encode_response(response, registry).SerializeToString()
    assert b"".join(convert.encode_wire_response(response, registry)) == expected


def test_large_raw_outputs_are_parts_of_their_own_and_not_copied(
    registry: SharedMemoryRegistry,
) -> None:
    from ptserve.common import datatypes
    from ptserve.common.requests import InferResponse, Tensor

    big = np.arange(100_000, dtype=np.float32)
    small = np.arange(4, dtype=np.int32)
    response = InferResponse(
        "model",
        "1",
        "",
        [
            Tensor("BIG", datatypes.from_name("FP32"), big),
            Tensor("SMALL", datatypes.from_name("INT32"), small),
            Tensor("BIG2", datatypes.from_name("FP32"), big[::-1].copy()),
        ],
    )
    parts = convert.encode_wire_response(response, registry)
    expected = convert.encode_response(response, registry).SerializeToString()
    assert b"".join(parts) == expected
    # The message head, BIG's data, the small output inlined with BIG2's field prefix, BIG2's
    # data: the large data are views of the outputs' own memory.
    assert len(parts) == 4
    assert isinstance(parts[1], memoryview) and np.shares_memory(np.asarray(parts[1]), big)
    assert isinstance(parts[3], memoryview) and len(parts[3]) == big.nbytes
    assert len(parts[2]) < 100


def test_a_wire_response_with_parameters_is_written_by_protobuf(
    registry: SharedMemoryRegistry,
) -> None:
    response = _response("x", {"sequence_id": 7, "flag": True})
    data = convert.encode_wire_response(response, registry)
    assert len(data) == 1  # (protobuf's own bytes)
    message = pb.ModelInferResponse.FromString(data[0])
    assert message == convert.encode_response(response, registry)
    assert message.parameters["sequence_id"].int64_param == 7
