"""The package's layers: imports point down (``lint-imports`` with the contracts in
pyproject.toml), no two modules import each other even by a detour, and no import hides in a
function or behind ``TYPE_CHECKING`` (which is how cycles are usually dodged)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "ptserve"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# Imports that may stay inside a function, and why.
LOCAL_IMPORTS_ALLOWED = {
    ("cli.py", "uvloop"),  # an optional speed-up: the server runs on asyncio without it
    # An optional extra (boto3): imported only when an s3:// repository is named.
    ("repository/sources.py", "ptserve.repository.s3"),
    # An optional extra (the OpenTelemetry SDK): imported only when the opentelemetry trace
    # mode is first asked for.
    ("core/tracing.py", "ptserve.core.otel"),
    # ``ptserve.Server``: the in-process API (torch, every frontend) is imported on first use,
    # so that importing any other part of the package does not import it; the same import
    # under TYPE_CHECKING gives the lazy names their types.
    ("__init__.py", "ptserve.embedded"),
    ("__init__.py", "ptserve.embedded.api"),
    ("embedded/loop.py", "uvloop"),  # as for cli.py: optional, asyncio's loop without it
}


def lint_imports(source_root: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(source_root))
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        env=env,
        cwd=source_root,
        timeout=120,
    )


def test_the_layer_contracts_hold() -> None:
    result = lint_imports(ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("common/errors.py", "ptserve.core.server"),  # the bottom layer reaching for the top
        ("scheduling/work.py", "ptserve.backends.base"),  # siblings that must stay apart
        ("transports/http1.py", "ptserve.config.parse"),  # a transport that knows models
    ],
)
def test_the_check_catches_an_import_that_points_up(
    tmp_path: Path, module: str, imported: str
) -> None:
    copy = tmp_path / "ptserve"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text(target.read_text() + f"\nimport {imported}  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout
    assert imported in result.stdout


def test_no_module_imports_itself_by_a_detour() -> None:
    graph = grimp.build_graph("ptserve")
    modules = sorted(graph.modules)
    index = {name: position for position, name in enumerate(modules)}
    edges = {name: graph.find_modules_directly_imported_by(name) for name in modules}
    # Tarjan's strongly connected components: any with more than one module is a cycle.
    low: dict[str, int] = {}
    order: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0

    def visit(name: str) -> None:
        nonlocal counter
        order[name] = low[name] = counter
        counter += 1
        stack.append(name)
        on_stack.add(name)
        for child in edges[name]:
            if child not in index:
                continue
            if child not in order:
                visit(child)
                low[name] = min(low[name], low[child])
            elif child in on_stack:
                low[name] = min(low[name], order[child])
        if low[name] == order[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for name in modules:
        if name not in order:
            visit(name)
    assert not cycles, cycles


def _hidden_imports(path: Path) -> list[str]:
    """Imports inside functions, classes or ``if TYPE_CHECKING`` blocks of one module."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[str] = []
    module_level = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            module_level.add(node)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and node not in module_level:
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                relative = path.relative_to(PACKAGE).as_posix()
                if (relative, name) not in LOCAL_IMPORTS_ALLOWED:
                    found.append(f"{relative}:{node.lineno} imports {name}")
    return found


def test_no_import_hides_in_a_function() -> None:
    hidden = [line for path in sorted(PACKAGE.rglob("*.py")) for line in _hidden_imports(path)]
    assert not hidden, hidden
