"""How config inputs and outputs meet the arguments and results of a TorchScript ``forward``.

Decided once at load. Inputs are bound by forward-argument names, else by ``<name>__<index>``,
else by config order (with a warning); a single ``Dict[str, Tensor]`` argument takes every input
by name. Outputs follow ``<name>__<index>`` when every name has that form, else config order.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ptserve.core.errors import invalid_arg

log = logging.getLogger("ptserve.backends.pytorch")

_INDEXED = re.compile(r"^(.*)__(\d+)$")
_ALLOWED_ARG_TYPES = ("Tensor", "List[")


@dataclass(frozen=True, slots=True)
class Argument:
    """One argument of ``forward`` (without ``self``): its name and TorchScript type string."""

    name: str
    type: str


@dataclass(frozen=True, slots=True)
class InputBinding:
    """The config input names in the order ``forward`` takes them, or dictionary mode."""

    order: tuple[str, ...]
    dictionary: bool
    convention: str  # "dictionary", "argument names", "index suffix", "config order"


def indexed_name(name: str) -> int | None:
    """The index of a ``<name>__<index>`` name, else None."""
    match = _INDEXED.match(name)
    return int(match.group(2)) if match else None


def bind_inputs(model: str, arguments: Sequence[Argument], inputs: Sequence[str]) -> InputBinding:
    """Decide how the config's inputs become ``forward``'s arguments."""
    arg_desc = ", ".join(f"{a.name}: {a.type}" for a in arguments) or "no arguments"
    if len(arguments) == 1 and arguments[0].type == "Dict[str, Tensor]":
        return InputBinding(tuple(inputs), True, "dictionary")
    for arg in arguments:
        if not _is_tensor_like(arg.type):
            raise invalid_arg(
                f"model '{model}': forward argument '{arg.name}' has type {arg.type}; every "
                "argument must be a Tensor, Optional[Tensor] or a List (or a single "
                f"Dict[str, Tensor] argument). forward takes ({arg_desc})"
            )
    if len(arguments) != len(inputs):
        raise invalid_arg(
            f"model '{model}': configuration expects {len(inputs)} inputs "
            f"({', '.join(inputs) or 'none'}), model provides {len(arguments)} "
            f"(forward takes {arg_desc})"
        )
    arg_names = [a.name for a in arguments]
    if set(inputs) == set(arg_names):
        return InputBinding(tuple(arg_names), False, "argument names")

    indices = [indexed_name(name) for name in inputs]
    if all(index is not None for index in indices):
        by_index: dict[int, str] = {}
        for name, index in zip(inputs, indices, strict=True):
            assert index is not None
            if index >= len(arguments):
                raise invalid_arg(
                    f"model '{model}': input '{name}' uses the <name>__<index> convention with "
                    f"index {index}, but forward takes only {len(arguments)} arguments "
                    f"({arg_desc}); indices must be 0 to {len(arguments) - 1}"
                )
            if index in by_index:
                raise invalid_arg(
                    f"model '{model}': inputs '{by_index[index]}' and '{name}' both use "
                    f"index {index} of the <name>__<index> convention"
                )
            by_index[index] = name
        return InputBinding(
            tuple(by_index[i] for i in range(len(arguments))), False, "index suffix"
        )

    log.warning(
        "model '%s': input names (%s) match neither forward's argument names (%s) nor the "
        "<name>__<index> convention; binding them in config order",
        model,
        ", ".join(inputs),
        ", ".join(arg_names),
    )
    return InputBinding(tuple(inputs), False, "config order")


def bind_outputs(model: str, outputs: Sequence[str]) -> tuple[int, ...]:
    """For each config output (in config order), the position of the model result it takes."""
    indices = [indexed_name(name) for name in outputs]
    if outputs and all(index is not None for index in indices):
        seen: dict[int, str] = {}
        for name, index in zip(outputs, indices, strict=True):
            assert index is not None
            if index in seen:
                raise invalid_arg(
                    f"model '{model}': outputs '{seen[index]}' and '{name}' both use index "
                    f"{index} of the <name>__<index> convention"
                )
            seen[index] = name
        return tuple(i for i in indices if i is not None)
    return tuple(range(len(outputs)))


def _is_tensor_like(type_str: str) -> bool:
    return type_str == "Tensor" or type_str.startswith("List[") or type_str == "Optional[Tensor]"
