"""Retaining freed host memory: executions of a model stop faulting its pages in afresh."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Page faults per batch-32 execution of the example CNN, in a fresh process (the setting is
# process-wide), with or without the server's host memory setting.
SCRIPT = """
import ctypes, resource, sys, torch
# glibc starts mapping blocks above 128 KiB afresh and moves that threshold with what it sees,
# so a plain process faults on every execution or not, by its history; held at its start
# value, it always does, and the setting must undo that.
ctypes.CDLL(None).mallopt(-3, 128 * 1024)
if sys.argv[2] == "retain":
    from ptserve.common.host_memory import retain_freed_memory
    assert retain_freed_memory()
torch.set_num_threads(1)
model = torch.jit.load(sys.argv[1])
data = torch.zeros(32, 3, 32, 32)
with torch.inference_mode():
    for _ in range(5):
        model(data)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        model(data)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""

glibc_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the setting is glibc's (Linux)"
)


def faults_per_execution(model: Path, mode: str) -> float:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(model), mode],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return float(result.stdout.split()[-1])


@glibc_only
def test_retained_memory_spares_the_page_faults_of_every_execution(
    example_repository: Path,
) -> None:
    model = example_repository / "cnn" / "1" / "model.pt"
    plain = faults_per_execution(model, "plain")
    retained = faults_per_execution(model, "retain")
    assert plain > 100, plain  # the activations are mapped and faulted in on every execution
    assert retained < plain / 10, (plain, retained)
