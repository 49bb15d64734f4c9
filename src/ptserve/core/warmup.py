"""Warm-up requests from a config's ``model_warmup``: run on every instance before it is ready.

A model's first executions are slow (lazy initialisation, allocator growth, kernels chosen on
first use); running the configured samples at load keeps that cost off users' requests.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ptserve.backends.base import BackendInstance
from ptserve.common import datatypes
from ptserve.common.device import Data
from ptserve.common.errors import ServerError, invalid_arg
from ptserve.common.iospec import IOSpec, ModelIO
from ptserve.common.prepared import PreparedRequest
from ptserve.config.parse import ModelConfig, data_type_name

log = logging.getLogger("ptserve.warmup")

WARMUP_FOLDER = "warmup"  # input_data_file paths are relative to <model>/warmup/


def _array(
    model: str, sample: str, name: str, spec: Any, rows: int | None, model_dir: Path
) -> np.ndarray:
    """The tensor of one warm-up input: ``[rows] + dims`` when batching, else ``dims``."""
    dtype = datatypes.from_config_name(data_type_name(spec.data_type))
    dims = [int(d) for d in spec.dims]
    if any(d < 0 for d in dims):
        raise invalid_arg(
            f"model '{model}': warm-up '{sample}' input '{name}' has a variable dimension "
            f"{dims}; warm-up dims must be fixed"
        )
    count = datatypes.element_count(dims)
    choice = spec.WhichOneof("input_data_type")
    if choice == "input_data_file":
        path = (model_dir / WARMUP_FOLDER / spec.input_data_file).resolve()
        if not path.is_relative_to((model_dir / WARMUP_FOLDER).resolve()) or not path.is_file():
            raise invalid_arg(
                f"model '{model}': warm-up '{sample}' input '{name}': data file {path} is not a "
                f"file inside {model_dir / WARMUP_FOLDER}"
            )
        raw = path.read_bytes()
        where = f"warm-up '{sample}' input '{name}'"
        if dtype is datatypes.BYTES:
            item = datatypes.deserialize_bytes(raw, count, where)
        else:
            if len(raw) < count * dtype.itemsize:
                raise invalid_arg(
                    f"model '{model}': {where}: data file {path} holds {len(raw)} bytes, "
                    f"{count * dtype.itemsize} needed for dims {dims}"
                )
            item = np.frombuffer(raw[: count * dtype.itemsize], dtype=dtype.numpy).copy()
        item = item.reshape(dims)
    elif dtype is datatypes.BYTES:
        item = np.full(dims, b"", dtype=object)
    elif choice == "random_data":
        rng = np.random.default_rng()
        if dtype.numpy.kind == "f":
            item = rng.random(dims).astype(dtype.numpy)
        elif dtype.numpy.kind == "b":
            item = rng.integers(0, 2, dims).astype(bool)
        else:
            item = rng.integers(0, 100, dims).astype(dtype.numpy)
    else:
        item = np.zeros(dims, dtype=dtype.numpy)
    if rows is None:
        return item
    return np.repeat(item[np.newaxis, ...], rows, axis=0)


def _zeros(spec: IOSpec, rows: int | None) -> np.ndarray:
    dims = spec.model_dims
    shape = ([rows] if rows is not None else []) + [1 if d < 0 else d for d in dims]
    if spec.datatype.is_bytes:
        array = np.empty(shape, dtype=object)
        array.fill(b"0")
        return array
    return np.zeros(shape, dtype=spec.datatype.numpy)


def warmup_requests(
    config: ModelConfig, io: ModelIO, model_dir: Path
) -> list[tuple[str, int, PreparedRequest]]:
    """(sample name, repeat count, request) for each ``model_warmup`` entry, built once."""
    requests: list[tuple[str, int, PreparedRequest]] = []
    for sample in config.model_warmup:
        rows = max(sample.batch_size, 1) if io.batching else None
        if rows is not None and rows > io.max_batch_size:
            raise invalid_arg(
                f"model '{config.name}': warm-up '{sample.name}' batch_size {rows} exceeds "
                f"max_batch_size {io.max_batch_size}"
            )
        inputs: dict[str, Data] = {}
        for name, spec in sample.inputs.items():
            if all(s.name != name for s in io.model_inputs):
                raise invalid_arg(
                    f"model '{config.name}': warm-up '{sample.name}' names unknown input '{name}'"
                )
            inputs[name] = _array(config.name, sample.name, name, spec, rows, model_dir)
        for extra in io.extra_inputs:
            # Sequence control and state inputs: zeros, as for a request outside any sequence.
            if extra.name not in inputs:
                inputs[extra.name] = _zeros(extra, rows)
        prepared = PreparedRequest(
            id=f"warmup:{sample.name}",
            inputs=inputs,
            batch_size=rows or 1,
            outputs=tuple(spec.name for spec in io.outputs),
        )
        requests.append((sample.name, max(sample.count, 1), prepared))
    return requests


def run_warmup(
    model: str,
    instance_name: str,
    instance: BackendInstance,
    requests: list[tuple[str, int, PreparedRequest]],
) -> None:
    """Run every sample ``count`` times on one instance; the first failure fails the load."""
    for sample, count, prepared in requests:
        for iteration in range(1, count + 1):
            log.debug(  # the reference's verbose line, which its tests look for
                "model '%s' instance %s is running warmup sample '%s' for iteration %d",
                model,
                instance_name,
                sample,
                iteration,
            )
            result = instance.execute([prepared]).results[0]
            if isinstance(result, ServerError):
                raise invalid_arg(
                    f"model '{model}': warm-up '{sample}' failed on instance "
                    f"'{instance_name}': {result.message}"
                )
        log.info(
            "model '%s' instance '%s': warm-up '%s' ran %d time(s)",
            model,
            instance_name,
            sample,
            count,
        )
