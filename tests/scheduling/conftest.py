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
    started = time.perf_counter()
    probe(torch.tensor([[2000.0, 0.0]]))
    return 2000 / (time.perf_counter() - started)
