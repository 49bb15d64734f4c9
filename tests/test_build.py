"""The request path runs compiled: the modules pyproject.toml names are extension modules, and
``make test`` tests them in that form (or, built with PTSERVE_PURE_PYTHON=1, all interpreted)."""

from __future__ import annotations

import ast
import importlib
import os
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def native_modules() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as file:
        modules: list[str] = tomllib.load(file)["tool"]["ptserve"]["native-modules"]
    return modules


def test_every_named_module_exists_and_is_typed_source() -> None:
    for name in native_modules():
        assert (ROOT / "src" / (name.replace(".", "/") + ".py")).is_file(), name


@pytest.mark.skipif(
    os.environ.get("PTSERVE_PURE_PYTHON", "") not in ("", "0"),
    reason="PTSERVE_PURE_PYTHON is set: the package was built interpreted",
)
def test_the_request_path_is_compiled() -> None:
    interpreted = [
        name
        for name in native_modules()
        if str(importlib.import_module(name).__file__).endswith(".py")
    ]
    assert not interpreted, (
        f"interpreted, not compiled: {interpreted} (run `make install`, or set "
        "PTSERVE_PURE_PYTHON=1 to test the interpreted build)"
    )


def test_no_compiled_function_binds_one_name_to_exceptions_of_different_types() -> None:
    """mypyc gives a name one type per function: ``except A as exc`` followed by ``except B as
    exc`` makes the second clause raise TypeError instead of handling B (mypy accepts it)."""
    clashes = []
    for name in native_modules():
        path = ROOT / "src" / (name.replace(".", "/") + ".py")
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            bound: dict[str, set[str]] = {}
            for node in ast.walk(function):
                if isinstance(node, ast.ExceptHandler) and node.name and node.type:
                    bound.setdefault(node.name, set()).add(ast.unparse(node.type))
            clashes += [
                f"{name}.{function.name}: {var} {sorted(types)}"
                for var, types in bound.items()
                if len(types) > 1
            ]
    assert not clashes
