"""Which config input or output is which tensor of a ``.pt2`` program, by the original's rules.

A program takes and returns tensors nested in tuples, lists and dictionaries; its call spec
(in and out ``TreeSpec``) says how they flatten to a list of leaves. A config names each leaf in
one of two ways: by ordinal (``INPUT__<n>`` / ``OUTPUT__<n>``: the n-th leaf), or by its path
in ``forward``'s signature: ``ARGS[i]`` for the i-th positional argument, ``KWARGS[key]`` for a
keyword argument, ``RESULT`` for the result, each followed by ``[index]`` into a tuple or list
and ``[key]`` into a dictionary (``ARGS[2][option1]``, ``RESULT[BBB][0]``). A config that uses
neither convention keeps ptserve's earlier rule: inputs in config order, outputs by the
result's own names or positions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch.utils._pytree as pytree

from ptserve.common.errors import invalid_arg

_ORDINAL = {"input": re.compile(r"INPUT__(\d+)"), "output": re.compile(r"OUTPUT__(\d+)")}


def leaf_names(spec: pytree.TreeSpec, inputs: bool) -> list[str]:
    """The path name of every leaf of a call spec, in leaf order."""
    structure = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
    names = [""] * spec.num_leaves
    for path, leaf in pytree.tree_flatten_with_path(structure)[0]:
        keys = list(path)
        if inputs:  # (args, kwargs)
            head = keys.pop(0)
            prefix = "KWARGS" if getattr(head, "idx", 0) == 1 else "ARGS"
        else:
            prefix = "RESULT"
        names[leaf] = prefix + "".join(f"[{_key(k)}]" for k in keys)
    return names


def _key(entry: object) -> str:
    for attribute in ("idx", "key", "name"):
        if hasattr(entry, attribute):
            return str(getattr(entry, attribute))
    return str(entry)


@dataclass(frozen=True, slots=True)
class LeafMap:
    """For each config name (in config order), the leaf it is; None: the earlier rule applies."""

    leaves: tuple[int, ...] | None
    convention: str


def map_names(
    model: str, kind: str, names: Sequence[str], spec: pytree.TreeSpec, inputs: bool
) -> LeafMap:
    """Map a config's input (or output) names onto the program's leaves; a load error names
    what does not fit and every name the program offers."""
    count = spec.num_leaves
    paths = leaf_names(spec, inputs)
    ordinal = _ORDINAL[kind]
    matches = [ordinal.fullmatch(name) for name in names]
    if names and all(matches):
        leaves = tuple(int(m.group(1)) for m in matches if m is not None)
        convention = "ordinal"
    elif names and all(name in paths for name in names):
        leaves = tuple(paths.index(name) for name in names)
        convention = "forward names"
    elif any(matches) or any(name in paths for name in names) or _looks_like_path(names):
        offered = ", ".join(
            f"{ordinal.pattern.split('(')[0]}{i} or {p}" for i, p in enumerate(paths)
        )
        raise invalid_arg(
            f"model '{model}': {kind}s {list(names)} mix or miss the two naming conventions of "
            f".pt2 programs; the program's {kind}s are: {offered}"
        )
    else:
        return LeafMap(None, "config order")
    wrong = [name for name, leaf in zip(names, leaves, strict=True) if leaf >= count]
    if wrong:
        raise invalid_arg(
            f"model '{model}': {kind}(s) {', '.join(wrong)} name a {kind} the program does not "
            f"have: it has {count} {kind}s ({', '.join(paths)})"
        )
    if len(set(leaves)) != len(leaves):
        raise invalid_arg(f"model '{model}': two {kind}s of the config name the same tensor")
    if inputs and len(leaves) != count:
        raise invalid_arg(
            f"model '{model}': the configuration has {len(leaves)} inputs, the program takes "
            f"{count} ({', '.join(paths)})"
        )
    return LeafMap(leaves, convention)


def _looks_like_path(names: Sequence[str]) -> bool:
    return any(re.match(r"(ARGS|KWARGS|RESULT)(\[|$)", name) for name in names)
