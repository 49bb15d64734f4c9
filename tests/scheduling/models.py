"""TorchScript test models that report what the scheduler did to them."""

from __future__ import annotations

import torch
from torch import nn


class BatchProbe(nn.Module):
    """OUTPUT0[i] = [batch size seen, INPUT0[i, 1] (a tag), calls made on this instance].

    ``INPUT0[:, 0]`` is a spin count: the largest in the batch sets how long it computes.
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        spins = int(INPUT0[:, 0].max().item())
        x = torch.ones(128, 128) / 128.0
        for _ in range(spins):
            x = torch.mm(x, x)
        rows = INPUT0.shape[0]
        size = torch.full([rows, 1], float(rows)) + x[0, 0] * 0.0
        calls = torch.full([rows, 1], float(self.calls))
        return torch.cat([size, INPUT0[:, 1:2], calls], dim=1)


class ShapeProbe(nn.Module):
    """OUTPUT0[i] = batch size seen, for inputs of any length."""

    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        return torch.full([INPUT0.shape[0], 1], float(INPUT0.shape[0]))


class SequenceProbe(nn.Module):
    """Echoes the control values and row, and accumulates INPUT in the implicit state.

    OUTPUT[i] = [START, END, READY, CORRID, new state, row, batch size].
    """

    def forward(
        self,
        INPUT: torch.Tensor,
        START: torch.Tensor,
        END: torch.Tensor,
        READY: torch.Tensor,
        CORRID: torch.Tensor,
        STATE_IN: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        state = STATE_IN + INPUT
        rows = INPUT.shape[0]
        row = torch.arange(rows, dtype=torch.float32).reshape(rows, 1)
        out = torch.cat(
            [
                START.to(torch.float32),
                END.to(torch.float32),
                READY.to(torch.float32),
                CORRID.to(torch.float32),
                state,
                row,
                torch.full([rows, 1], float(rows)),
            ],
            dim=1,
        )
        return out, state


class StringSequenceProbe(nn.Module):
    """OUTPUT = INPUT + STATE_IN (the running sum); OUTPUT_STATE carries it on."""

    def forward(
        self, INPUT: torch.Tensor, READY: torch.Tensor, STATE_IN: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        state = STATE_IN + INPUT * READY.to(torch.float32)
        size = torch.full([INPUT.shape[0], 1], float(INPUT.shape[0]))
        return state, size, state


def script(module: nn.Module) -> torch.jit.ScriptModule:
    scripted: torch.jit.ScriptModule = torch.jit.script(module)
    return scripted
