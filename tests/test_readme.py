"""The README's Python API block runs as written, from an empty directory: saved as a script and
run with `python api.py`, and as a notebook runs it (code read by the interpreter, no script file)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _api_block() -> str:
    text = README.read_text()
    section = text[text.index("## Python API") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_api_block_is_there():
    code = _api_block()
    assert "build_generator" in code and "reverse_ess" in code
    compile(code, "README.md", "exec")


def _run_block(tmp_path: Path, how: str) -> subprocess.CompletedProcess:
    code = _api_block()
    env = {**os.environ, "PYTHONPATH": str(README.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if how == "script":  # what a user does who pastes the block into a file
        (tmp_path / "api.py").write_text(code)
        argv, stdin = [sys.executable, "api.py"], None
    else:
        # A notebook's kernel executes cells in __main__ with no script file (no __file__). `python -`
        # is not quite that: it sets __file__ to "<stdin>", which multiprocessing's spawn then tries to run.
        argv, stdin = [sys.executable, "-c", "import sys; exec(compile(sys.stdin.read(), '<cell>', 'exec'))"], code
    return subprocess.run(argv, input=stdin, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["script", "notebook"])
def test_readme_api_block_runs(tmp_path, how):
    done = _run_block(tmp_path, how)
    assert done.returncode == 0, done.stderr[-2000:]
    ess, median = map(float, re.search(r"reverse ESS (\S+), median energy (\S+) kT", done.stdout).groups())
    assert 0.0 < ess <= 1.0 and -20.0 < median < 100.0  # a trained-briefly generator: finite, physical
    assert (tmp_path / "ala2.h5").exists()
    refined = float(re.search(r"refined: reverse ESS (\S+) for", done.stdout).group(1))
    assert 0.0 < refined <= 1.0
