"""The README's Python API block runs as written, from an empty directory."""

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


@pytest.mark.slow
def test_readme_api_block_runs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(README.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", _api_block()], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ess, median = map(float, re.search(r"reverse ESS (\S+), median energy (\S+) kT", done.stdout).groups())
    assert 0.0 < ess <= 1.0 and -20.0 < median < 100.0  # a trained-briefly generator: finite, physical
    assert (tmp_path / "ala2.h5").exists()
    refined = float(re.search(r"refined: reverse ESS (\S+) for", done.stdout).group(1))
    assert 0.0 < refined <= 1.0
