"""Small models and clients shared by the deployment tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import tritonclient.http as httpclient

from ptserve.examples import Scale, write_model


def scaled_config(name: str = "", batching: bool = True) -> str:
    """A model whose OUTPUT0 is INPUT0 (FP32 x 4) times a factor; no name when ``name`` is ""."""
    named = f'name: "{name}"' if name else ""
    return f"""
        {named}
        platform: "pytorch_libtorch"
        max_batch_size: {8 if batching else 0}
        input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
    """


def write_scaled(repository: Path, name: str, factors: dict[int, float]) -> Path:
    """``repository/name`` with one version per entry of ``factors``."""
    modules = {v: torch.jit.script(Scale(f)) for v, f in factors.items()}
    return write_model(repository, name, scaled_config(name), modules)


def infer_scaled(url: str, model: str, timeout: float = 10.0) -> float:
    """The factor ``model`` multiplies by, asked over HTTP with tritonclient."""
    client = httpclient.InferenceServerClient(url, network_timeout=timeout)
    try:
        data = np.ones((1, 4), np.float32)
        inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(data)
        return float(client.infer(model, inputs).as_numpy("OUTPUT0")[0, 0])
    finally:
        client.close()


def wait_until(condition: Callable[[], object], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"not met within {timeout} s: {what or condition}")


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    def accepting() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    wait_until(accepting, timeout, f"a listener on port {port}")
