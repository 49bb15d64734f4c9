"""The README's in-process API examples run as written, and ``import ptserve`` stays light."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import ptserve

README = Path(__file__).resolve().parents[2] / "README.md"


def section_code(heading: str) -> str:
    text = README.read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    blocks = re.findall(r"```python\n(.*?)```", text[start:end], re.DOTALL)
    assert blocks, f"no Python example under {heading}"
    return "\n".join(blocks)


def test_the_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(section_code("## In-process API"), str(README), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "(4, 10)"
    assert printed[1] == "Tensor"
    assert printed[3] == "2"
    assert printed[4].startswith("400 ") and "expects 'FP32'" in printed[4]
    assert printed[-1].startswith("[[ 0  2  4")


def test_the_package_exposes_the_api_lazily() -> None:
    assert ptserve.Server.__module__ == "ptserve.embedded.sync"
    assert ptserve.AsyncServer.__module__ == "ptserve.embedded.aio"
    assert ptserve.InferenceError is ptserve.ServerError
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = ptserve.Nothing  # type: ignore[attr-defined]
    probe = (
        "import sys, ptserve.common.errors, ptserve.transports.http1; "
        "print('torch' in sys.modules, 'ptserve.embedded.api' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.split() == ["False", "False"]
