"""Ragged batching: the ``batch_input`` tensors of a batch, and ``batch_output`` scatter.

Framework-independent (numpy only), as the original keeps them in the library its backends
share. Everything is derived from the shapes of the source input in each request of the batch,
as the model sees them (after any config reshape, the batch dimension first):

- BATCH_ELEMENT_COUNT: ``[n]``, the element count of each request's source input.
- BATCH_ACCUMULATED_ELEMENT_COUNT: ``[n]``, the running sum of those counts.
- BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO: ``[n + 1]``, a 0 then the running sum.
- BATCH_MAX_ELEMENT_COUNT_AS_SHAPE: ``[max count]``; only the shape carries information (the
  original leaves the data uninitialised; here it is zeros).
- BATCH_ITEM_SHAPE: ``[total batch size, rank - 1]``, each batch item's shape without the batch
  dimension (a request of batch size b contributes b equal rows).
- BATCH_ITEM_SHAPE_FLATTEN: the same values in one dimension.

BATCH_SCATTER_WITH_INPUT_SHAPE gives each request, from the flattened model result, the next
elements of the output's configured shape (the batch dimension first when batching), where each
``-1`` takes the size of the same dimension of that request's source input.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ptserve.common.datatypes import element_count
from ptserve.common.errors import internal, invalid_arg
from ptserve.common.iospec import BatchInputSpec
from ptserve.common.prepared import PreparedRequest

ELEMENT_COUNT = "BATCH_ELEMENT_COUNT"
ACCUMULATED_ELEMENT_COUNT = "BATCH_ACCUMULATED_ELEMENT_COUNT"
ACCUMULATED_ELEMENT_COUNT_WITH_ZERO = "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO"
MAX_ELEMENT_COUNT_AS_SHAPE = "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE"
ITEM_SHAPE = "BATCH_ITEM_SHAPE"
ITEM_SHAPE_FLATTEN = "BATCH_ITEM_SHAPE_FLATTEN"
SCATTER_WITH_INPUT_SHAPE = "BATCH_SCATTER_WITH_INPUT_SHAPE"

Shape = tuple[int, ...]


def source_shapes(source: str, requests: Sequence[PreparedRequest], what: str) -> list[Shape]:
    """The shape of input ``source`` in each request; ``what`` names the batch input/output."""
    shapes: list[Shape] = []
    for request in requests:
        array = request.inputs.get(source)
        if array is None:
            raise invalid_arg(
                f"{what} is derived from input '{source}', which the request "
                f"'{request.id}' does not carry"
            )
        shapes.append(tuple(int(d) for d in array.shape))
    return shapes


def batch_input_array(spec: BatchInputSpec, shapes: Sequence[Shape]) -> np.ndarray:
    """The tensor of one batch input for a batch whose source inputs have ``shapes``."""
    dtype = spec.datatype.numpy
    counts = [element_count(shape) for shape in shapes]
    kind = spec.kind
    if kind == ELEMENT_COUNT:
        return np.asarray(counts, dtype=dtype).reshape(len(counts))
    if kind == ACCUMULATED_ELEMENT_COUNT:
        return np.cumsum(np.asarray(counts, dtype=np.int64)).astype(dtype).reshape(len(counts))
    if kind == ACCUMULATED_ELEMENT_COUNT_WITH_ZERO:
        running = np.cumsum(np.asarray([0, *counts], dtype=np.int64))
        return running.astype(dtype).reshape(len(counts) + 1)
    if kind == MAX_ELEMENT_COUNT_AS_SHAPE:
        return np.zeros((max(counts, default=0),), dtype=dtype)
    if kind in (ITEM_SHAPE, ITEM_SHAPE_FLATTEN):
        rows = _item_shapes(spec, shapes)
        array = np.asarray(rows, dtype=dtype).reshape(len(rows), _item_rank(shapes))
        return array.reshape(-1) if kind == ITEM_SHAPE_FLATTEN else array
    raise invalid_arg(f"batch input kind '{kind}' is not supported")


def _item_rank(shapes: Sequence[Shape]) -> int:
    return len(shapes[-1]) - 1 if shapes else 0


def _item_shapes(spec: BatchInputSpec, shapes: Sequence[Shape]) -> list[Shape]:
    rows: list[Shape] = []
    rank = _item_rank(shapes)
    for shape in shapes:
        if not shape or len(shape) - 1 != rank:
            raise invalid_arg(
                f"batch input '{spec.targets[0] if spec.targets else spec.kind}' ({spec.kind}) "
                f"needs source input '{spec.source}' with a batch dimension and the same rank "
                f"in every request; got shapes {[list(s) for s in shapes]}"
            )
        rows.extend([shape[1:]] * shape[0])
    return rows


def scatter_with_input_shape(
    model: str,
    name: str,
    flat: np.ndarray,
    template: Sequence[int],
    shapes: Sequence[Shape],
) -> list[np.ndarray]:
    """Each request's part of output ``name`` (``flat``: the model result, one-dimensional)."""
    parts: list[np.ndarray] = []
    offset = 0
    for shape in shapes:
        part_shape: list[int] = []
        for index, dim in enumerate(template):
            if dim != -1:
                part_shape.append(dim)
            elif index < len(shape):
                part_shape.append(shape[index])
            else:
                raise internal(
                    f"model '{model}': batch output '{name}' has a variable dimension {index} "
                    f"(shape {list(template)}), but its source input has only {len(shape)} "
                    f"dimension(s) ({list(shape)})"
                )
        count = element_count(part_shape)
        if offset + count > flat.size:
            raise internal(
                f"model '{model}': batch output '{name}' has {flat.size} element(s), fewer "
                f"than the {offset + count} the shapes of its source input in the batch need"
            )
        parts.append(flat[offset : offset + count].reshape(part_shape))
        offset += count
    return parts
