"""Builds ptserve with its request path compiled to C by mypyc.

The modules named by ``[tool.ptserve] native-modules`` in pyproject.toml run on every inference
request. They are ordinary, fully typed Python (the source of truth, checked by ``mypy
--strict``); mypyc turns each into an extension module that Python imports in place of the
``.py`` file, with native attribute access and calls where the types allow. Everything else stays
interpreted. ``PTSERVE_PURE_PYTHON=1`` builds without a compiler: the package then runs the same
code, interpreted and slower.
"""

import os
import tomllib
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent


def native_extensions() -> list[Extension]:
    if os.environ.get("PTSERVE_PURE_PYTHON", "") not in ("", "0"):
        return []
    from mypyc.build import mypycify

    with open(ROOT / "pyproject.toml", "rb") as file:
        modules = tomllib.load(file)["tool"]["ptserve"]["native-modules"]
    paths = [f"src/{name.replace('.', '/')}.py" for name in modules]
    # The build reads the types it compiles from the installed dependencies; an optional one
    # that is absent (the ``otel`` extra) types as Any here, and leaves its ``type: ignore``
    # comments unused. ``mypy --strict`` on the package (``make lint``) is the type check.
    options = ["--ignore-missing-imports", "--no-warn-unused-ignores"]
    return mypycify(options + paths, opt_level="3", debug_level="1", multi_file=True)


setup(ext_modules=native_extensions())
