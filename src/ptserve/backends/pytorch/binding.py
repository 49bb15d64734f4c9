"""How config inputs and outputs meet the arguments and results of a TorchScript method.

Decided once at load. Inputs are bound by argument names, else by ``<name>__<index>``, else by
config order (with a warning); a single ``Dict[str, Tensor]`` argument takes every input by name.
Beyond the original: a ``List[Tensor]`` or ``Tuple[Tensor, ...]`` argument ``xs`` takes the
inputs named ``xs__0``, ``xs__1``, ... (argument-name convention), and an ``Optional[Tensor]``
argument may take an ``optional: true`` input (None when a request leaves it out).
Outputs follow ``<name>__<index>`` when every name has that form, else config order.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ptserve.core.errors import invalid_arg

log = logging.getLogger("ptserve.backends.pytorch")

_INDEXED = re.compile(r"^(.*)__(\d+)$")
_TUPLE_OF_TENSORS = re.compile(r"^Tuple\[Tensor(, Tensor)*\]$")


@dataclass(frozen=True, slots=True)
class Argument:
    """One argument of the method (without ``self``): its name and TorchScript type string."""

    name: str
    type: str

    @property
    def packed(self) -> str:
        """ "list" or "tuple" for an argument that packs several inputs, else ""."""
        if self.type == "List[Tensor]":
            return "list"
        if _TUPLE_OF_TENSORS.match(self.type):
            return "tuple"
        return ""

    @property
    def tuple_size(self) -> int:
        return self.type.count("Tensor") if self.packed == "tuple" else 0


@dataclass(frozen=True, slots=True)
class Slot:
    """One positional argument: the config input(s) it takes and how they are packed."""

    names: tuple[str, ...]
    packing: str = ""  # "", "list" or "tuple"


@dataclass(frozen=True, slots=True)
class InputBinding:
    """The config inputs in the order the method takes them, or dictionary mode."""

    slots: tuple[Slot, ...]
    dictionary: bool
    convention: str  # "dictionary", "argument names", "index suffix", "config order"

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(name for slot in self.slots for name in slot.names)


def indexed_name(name: str) -> int | None:
    """The index of a ``<name>__<index>`` name, else None."""
    match = _INDEXED.match(name)
    return int(match.group(2)) if match else None


def positional(inputs: Sequence[str]) -> InputBinding:
    """Config order, one input per argument: the Python runtime's and the .pt2 convention."""
    return InputBinding(tuple(Slot((name,)) for name in inputs), False, "config order")


def bind_inputs(model: str, arguments: Sequence[Argument], inputs: Sequence[str]) -> InputBinding:
    """Decide how the config's inputs become the method's arguments."""
    arg_desc = ", ".join(f"{a.name}: {a.type}" for a in arguments) or "no arguments"
    if len(arguments) == 1 and arguments[0].type == "Dict[str, Tensor]":
        return InputBinding((Slot(tuple(inputs)),), True, "dictionary")
    for arg in arguments:
        if not _is_tensor_like(arg.type):
            raise invalid_arg(
                f"model '{model}': argument '{arg.name}' has type {arg.type}; every argument "
                "must be a Tensor, Optional[Tensor], List[str], List[Tensor] or "
                f"Tuple[Tensor, ...] (or a single Dict[str, Tensor] argument). The method "
                f"takes ({arg_desc})"
            )
    by_names = _bind_by_names(model, arguments, inputs)
    if by_names is not None:
        return by_names
    packed = [a for a in arguments if a.packed]
    if packed:
        raise invalid_arg(
            f"model '{model}': argument(s) {', '.join(a.name for a in packed)} take several "
            f"inputs, which must be named <argument>__<index> (e.g. '{packed[0].name}__0'), "
            f"and every other input must be named like its argument; the config has inputs "
            f"({', '.join(inputs) or 'none'}), the method takes ({arg_desc})"
        )
    if len(arguments) != len(inputs):
        raise invalid_arg(
            f"model '{model}': configuration expects {len(inputs)} inputs "
            f"({', '.join(inputs) or 'none'}), model provides {len(arguments)} "
            f"(the method takes {arg_desc}); tried argument names, then <name>__<index>, "
            "then config order"
        )
    indices = [indexed_name(name) for name in inputs]
    if all(index is not None for index in indices):
        by_index: dict[int, str] = {}
        for name, index in zip(inputs, indices, strict=True):
            assert index is not None
            if index >= len(arguments):
                raise invalid_arg(
                    f"model '{model}': input '{name}' uses the <name>__<index> convention with "
                    f"index {index}, but the method takes only {len(arguments)} arguments "
                    f"({arg_desc}); indices must be 0 to {len(arguments) - 1}"
                )
            if index in by_index:
                raise invalid_arg(
                    f"model '{model}': inputs '{by_index[index]}' and '{name}' both use "
                    f"index {index} of the <name>__<index> convention"
                )
            by_index[index] = name
        slots = tuple(Slot((by_index[i],)) for i in range(len(arguments)))
        return InputBinding(slots, False, "index suffix")

    log.warning(
        "model '%s': input names (%s) match neither the argument names (%s) nor the "
        "<name>__<index> convention; binding them in config order",
        model,
        ", ".join(inputs),
        ", ".join(a.name for a in arguments),
    )
    return InputBinding(tuple(Slot((name,)) for name in inputs), False, "config order")


def _bind_by_names(
    model: str, arguments: Sequence[Argument], inputs: Sequence[str]
) -> InputBinding | None:
    """Every input is an argument's name, or ``<arg>__<k>`` of a packed argument; else None."""
    by_arg: dict[str, dict[int, str]] = {a.name: {} for a in arguments}
    packing = {a.name: a.packed for a in arguments}
    for name in inputs:
        if name in by_arg and not packing[name]:
            if by_arg[name]:
                return None
            by_arg[name][0] = name
            continue
        match = _INDEXED.match(name)
        if match is None or match.group(1) not in by_arg or not packing[match.group(1)]:
            return None
        by_arg[match.group(1)][int(match.group(2))] = name
    slots: list[Slot] = []
    for arg in arguments:
        taken = by_arg[arg.name]
        if not taken:
            return None
        if arg.packed:
            count = len(taken)
            if sorted(taken) != list(range(count)):
                raise invalid_arg(
                    f"model '{model}': the inputs of argument '{arg.name}' must be numbered "
                    f"{arg.name}__0 to {arg.name}__{count - 1} without gaps; got "
                    f"{', '.join(taken[i] for i in sorted(taken))}"
                )
            if arg.packed == "tuple" and count != arg.tuple_size:
                raise invalid_arg(
                    f"model '{model}': argument '{arg.name}' is {arg.type} but the config "
                    f"gives it {count} input(s)"
                )
            slots.append(Slot(tuple(taken[i] for i in range(count)), arg.packed))
        else:
            slots.append(Slot((taken[0],)))
    return InputBinding(tuple(slots), False, "argument names")


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
    return (
        type_str in ("Tensor", "Optional[Tensor]")
        or type_str.startswith("List[")
        or bool(_TUPLE_OF_TENSORS.match(type_str))
    )
