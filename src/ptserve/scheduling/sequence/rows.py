"""The rows a sequence model runs: the client's inputs plus control values and carried state.

Control values and carried state live on the host: a client's device inputs pass through as they
came, and a state output that the backend returned on a device is copied to the host when kept.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from ptserve.common.device import Data, to_host
from ptserve.common.errors import invalid_arg
from ptserve.common.iospec import ModelIO
from ptserve.common.prepared import OutputMap, PreparedRequest
from ptserve.common.sequence_io import CORRID, END, READY, START, Control, SequenceIO
from ptserve.scheduling.sequence.slots import Sequence
from ptserve.scheduling.work import WorkItem


class RowBuilder:
    """Fills control and state tensors into requests; decided once per model at load."""

    def __init__(self, io: ModelIO, model: str) -> None:
        assert io.sequence is not None
        self.plan: SequenceIO = io.sequence
        self.model = model
        self.batching = io.batching
        self.state_outputs = tuple(s.output_name for s in self.plan.states)
        lead = (1,) if self.batching else ()
        self._initial = {
            s.input_name: s.initial.reshape(lead + s.initial.shape) for s in self.plan.states
        }
        self._flags = {
            (c.name, on): c.flag(on).reshape((*lead, 1))
            for c in self.plan.controls
            if c.kind != CORRID
            for on in (False, True)
        }

    def row(self, item: WorkItem, sequence: Sequence) -> PreparedRequest:
        """The request of ``item`` as the model takes it, with its sequence's controls and state."""
        request = item.request
        options = item.options
        inputs = dict(request.inputs)
        for control in self.plan.controls:
            inputs[control.name] = self._control(
                control, options.start, options.end, True, sequence.id
            )
        fresh = options.start or not sequence.state
        for state in self.plan.states:
            name = state.input_name
            inputs[name] = self._initial[name] if fresh else sequence.state[name]
        outputs = request.outputs + tuple(
            name for name in self.state_outputs if name not in request.outputs
        )
        return PreparedRequest(request.id, inputs, request.batch_size, outputs, request.parameters)

    def filler(self, template: PreparedRequest) -> PreparedRequest:
        """A not-READY row for an idle slot of a direct batch, shaped like ``template``."""
        inputs: dict[str, Data] = {}
        for name, array in template.inputs.items():  # (host zeros also for a device template)
            inputs[name] = (
                np.full(array.shape, b"", dtype=object)
                if array.dtype == object
                else np.zeros(array.shape, dtype=array.dtype)
            )
        for control in self.plan.controls:
            inputs[control.name] = self._control(control, False, False, False, 0)
        for state in self.plan.states:
            inputs[state.input_name] = self._initial[state.input_name]
        return PreparedRequest("", inputs, 1, ())

    def key(self, request: PreparedRequest) -> Hashable:
        """Rows batch together only when every tensor but the batch dimension agrees in shape."""
        start = 1 if self.batching else 0
        return tuple((name, array.shape[start:]) for name, array in request.inputs.items())

    def keep_state(
        self, sequence: Sequence, outputs: OutputMap, requested: tuple[str, ...] = ()
    ) -> None:
        """Keep the state outputs for the next request; they leave the answer unless the
        client asked for them (a state output that is also a config output)."""
        for state in self.plan.states:
            name = state.output_name
            value = outputs.get(name) if name in requested else outputs.pop(name, None)
            if value is not None:
                sequence.state[state.input_name] = np.array(to_host(value), copy=True)

    def _control(
        self, control: Control, start: bool, end: bool, ready: bool, sequence_id: int | str
    ) -> np.ndarray:
        if control.kind == START:
            return self._flags[(control.name, start)]
        if control.kind == END:
            return self._flags[(control.name, end)]
        if control.kind == READY:
            return self._flags[(control.name, ready)]
        try:
            value = control.correlation(sequence_id)
        except ValueError as exc:
            raise invalid_arg(f"model '{self.model}': {exc}") from None
        return value.reshape((1, 1)) if self.batching else value
