"""Fixtures of the scheduling tests: a spin count calibrated on this machine."""

from __future__ import annotations

import time

import pytest
import torch

from tests.scheduling import models


@pytest.fixture(scope="session")
def spins_per_second() -> float:
    """How many BatchProbe spins one thread runs per second here (to size slow requests)."""
    torch.set_num_threads(1)
    probe = models.script(models.BatchProbe())
    probe(torch.tensor([[50.0, 0.0]]))
    # The fastest of a few rounds: a round slowed by the machine's other work would make the
    # "slow" requests sized from it run faster than the tests expect.
    rates = []
    for _ in range(3):
        started = time.perf_counter()
        probe(torch.tensor([[2000.0, 0.0]]))
        rates.append(2000 / (time.perf_counter() - started))
    return max(rates)
