"""Per-model input/output facts decided once at load: types, shapes, reshape, batching."""

from __future__ import annotations

from dataclasses import dataclass, field

from ptserve.common.datatypes import DataType
from ptserve.common.sequence_io import SequenceIO


@dataclass(frozen=True, slots=True)
class IOSpec:
    """One configured input or output."""

    name: str
    datatype: DataType
    dims: tuple[int, ...]  # as the client sees it, without the batch dimension
    reshape: tuple[int, ...] | None  # as the model sees it, without the batch dimension
    optional: bool = False
    allow_ragged_batch: bool = False
    label_filename: str = ""

    @property
    def model_dims(self) -> tuple[int, ...]:
        """The dimensions as the model sees them (the reshape if any), without the batch one."""
        return self.reshape if self.reshape is not None else self.dims

    def full_shape(self, batching: bool) -> list[int]:
        """The shape clients see in metadata: ``-1`` first for batching models."""
        return ([-1] if batching else []) + list(self.dims)


@dataclass(frozen=True, slots=True)
class BatchInputSpec:
    """One ``batch_input``: tensors the server builds from a batch's requests for the model."""

    kind: str  # the BatchInput.Kind name, e.g. "BATCH_ELEMENT_COUNT"
    targets: tuple[str, ...]  # the model inputs that receive it (each gets the same tensor)
    datatype: DataType  # FP32 or INT32
    sources: tuple[str, ...]  # the config inputs whose shapes it describes

    @property
    def source(self) -> str:
        return self.sources[0] if self.sources else ""

    def target_specs(self) -> tuple[IOSpec, ...]:
        """The targets as model inputs: never sent by clients, so no client dims to speak of."""
        return tuple(
            IOSpec(name=name, datatype=self.datatype, dims=(-1,), reshape=None)
            for name in self.targets
        )


@dataclass(frozen=True, slots=True)
class BatchOutputSpec:
    """One ``batch_output``: model results split per request by another input's shape."""

    kind: str  # the BatchOutput.Kind name: "BATCH_SCATTER_WITH_INPUT_SHAPE"
    targets: tuple[str, ...]  # the config outputs it applies to
    sources: tuple[str, ...]  # the config inputs whose per-request shapes size each part

    @property
    def source(self) -> str:
        return self.sources[0] if self.sources else ""


@dataclass(frozen=True, slots=True)
class ModelIO:
    """All inputs and outputs of a model, in config order."""

    max_batch_size: int
    inputs: tuple[IOSpec, ...]
    outputs: tuple[IOSpec, ...]
    # What the model itself takes and returns beyond the client-visible tensors: sequence
    # control inputs and implicit state. Schedulers fill them into PreparedRequest.inputs.
    extra_inputs: tuple[IOSpec, ...] = ()
    extra_outputs: tuple[IOSpec, ...] = ()
    sequence: SequenceIO | None = None  # the control and state plan of a sequence model
    # Ragged batching: tensors generated per batch for the model, and outputs scattered back.
    batch_inputs: tuple[BatchInputSpec, ...] = ()
    batch_outputs: tuple[BatchOutputSpec, ...] = ()
    # Looked up on every request: derived once from the fields above.
    batching: bool = field(init=False)
    output_names: tuple[str, ...] = field(init=False)
    _inputs_by_name: dict[str, IOSpec] = field(init=False, repr=False, compare=False)
    _outputs_by_name: dict[str, IOSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "batching", self.max_batch_size > 0)
        setattr_(self, "output_names", tuple(spec.name for spec in self.outputs))
        setattr_(self, "_inputs_by_name", {spec.name: spec for spec in self.inputs})
        setattr_(self, "_outputs_by_name", {spec.name: spec for spec in self.outputs})

    @property
    def model_inputs(self) -> tuple[IOSpec, ...]:
        """Every tensor ``forward`` receives: config inputs, control and state inputs, then
        the targets of the batch inputs (in config order, as the original numbers them)."""
        return self.inputs + self.extra_inputs + self.batch_input_targets

    @property
    def batch_input_targets(self) -> tuple[IOSpec, ...]:
        return tuple(spec for b in self.batch_inputs for spec in b.target_specs())

    def batch_output(self, name: str) -> BatchOutputSpec | None:
        for spec in self.batch_outputs:
            if name in spec.targets:
                return spec
        return None

    @property
    def model_outputs(self) -> tuple[IOSpec, ...]:
        """Every tensor ``forward`` returns: config outputs, then state outputs."""
        return self.outputs + self.extra_outputs

    def input(self, name: str) -> IOSpec | None:
        return self._inputs_by_name.get(name)

    def output(self, name: str) -> IOSpec | None:
        return self._outputs_by_name.get(name)
