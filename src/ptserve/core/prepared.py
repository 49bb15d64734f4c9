"""A request checked against its model and shaped as the model wants it: what backends execute."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(slots=True)
class PreparedRequest:
    """Inputs keyed by config name, already reshaped; the batch dimension first when batching."""

    id: str
    inputs: dict[str, np.ndarray]
    batch_size: int  # 1 for models without batching
    outputs: tuple[str, ...]  # the outputs to return, in config order
    parameters: dict[str, Any] = field(default_factory=dict)


OutputMap = dict[str, np.ndarray]
