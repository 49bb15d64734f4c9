"""Every datatype through raw contents (tritonclient) and typed contents (the raw stub)."""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb

from ptserve.common.datatypes import float32_to_bf16
from tests.frontends.grpc.conftest import identity_name

SAMPLES: dict[str, np.ndarray] = {
    "BOOL": np.array([[True, False, True], [False, False, True]]),
    "UINT8": np.array([[0, 7, 255], [1, 2, 3]], dtype=np.uint8),
    "UINT16": np.array([[0, 7, 65535], [1, 2, 3]], dtype=np.uint16),
    "UINT32": np.array([[0, 7, 2**32 - 1], [1, 2, 3]], dtype=np.uint32),
    "UINT64": np.array([[0, 7, 2**64 - 1], [1, 2, 3]], dtype=np.uint64),
    "INT8": np.array([[-128, 0, 127], [1, -2, 3]], dtype=np.int8),
    "INT16": np.array([[-32768, 0, 32767], [1, -2, 3]], dtype=np.int16),
    "INT32": np.array([[-(2**31), 0, 2**31 - 1], [1, -2, 3]], dtype=np.int32),
    "INT64": np.array([[-(2**63), 0, 2**63 - 1], [1, -2, 3]], dtype=np.int64),
    "FP16": np.array([[0.5, -1.25, 65504.0], [1, 2, 3]], dtype=np.float16),
    "FP32": np.array([[0.5, -1.25, 3.4e38], [1, 2, 3]], dtype=np.float32),
    "FP64": np.array([[0.5, -1.25, 1e300], [1, 2, 3]], dtype=np.float64),
}

TYPED = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}


@pytest.mark.parametrize("dtype", sorted(SAMPLES))
def test_raw_round_trip(shm_client: grpcclient.InferenceServerClient, dtype: str) -> None:
    data = SAMPLES[dtype]
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), dtype)
    tensor.set_data_from_numpy(data)
    result = shm_client.infer(identity_name(dtype), [tensor])
    output = result.as_numpy("OUTPUT0")
    assert output.dtype == data.dtype
    np.testing.assert_array_equal(output, data)
    assert result.get_response().outputs[0].datatype == dtype


def test_bf16_raw_round_trip(shm_stub: Any) -> None:
    values = np.array([[1.0, -2.5, 0.15625]], dtype=np.float32)
    bits = float32_to_bf16(values)
    request = pb.ModelInferRequest(model_name=identity_name("BF16"))
    request.inputs.add(name="INPUT0", datatype="BF16", shape=[1, 3])
    request.raw_input_contents.append(bits.tobytes())
    response = shm_stub.ModelInfer(request)
    assert response.outputs[0].datatype == "BF16"
    assert response.raw_output_contents[0] == bits.tobytes()


@pytest.mark.parametrize("dtype", sorted(TYPED))
def test_typed_contents(shm_stub: Any, dtype: str) -> None:
    data = SAMPLES[dtype]
    request = pb.ModelInferRequest(model_name=identity_name(dtype))
    entry = request.inputs.add(name="INPUT0", datatype=dtype, shape=list(data.shape))
    getattr(entry.contents, TYPED[dtype]).extend(data.reshape(-1).tolist())
    response = shm_stub.ModelInfer(request)
    output = np.frombuffer(response.raw_output_contents[0], dtype=data.dtype)
    np.testing.assert_array_equal(output.reshape(data.shape), data)


def test_typed_contents_refused_for_fp16_and_out_of_range(shm_stub: Any) -> None:
    request = pb.ModelInferRequest(model_name=identity_name("FP16"))
    entry = request.inputs.add(name="INPUT0", datatype="FP16", shape=[1, 1])
    entry.contents.fp32_contents.append(1.0)
    with pytest.raises(grpc.RpcError) as error:
        shm_stub.ModelInfer(request)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "FP16 data cannot travel in typed contents" in error.value.details()

    request = pb.ModelInferRequest(model_name=identity_name("UINT8"))
    entry = request.inputs.add(name="INPUT0", datatype="UINT8", shape=[1, 2])
    entry.contents.uint_contents.extend([1, 256])
    with pytest.raises(grpc.RpcError) as error:
        shm_stub.ModelInfer(request)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "value 256 is out of range for UINT8" in error.value.details()
