"""Helpers of the command-line tests: `bgp4` in a child process, the one line a refused command writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["_one_line_error", "start_cli"]


def start_cli(*args: str, cwd: Path, **popen) -> subprocess.Popen:
    """`bgp4 ARGS` started in a child process in `cwd`, its output piped as text (more Popen options: popen)."""
    return subprocess.Popen(
        [sys.executable, "-m", "bgp4.cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def _one_line_error(result, code: int = 2) -> str:
    """The one stderr line of a refused command (an in-process `cli` result or a subprocess), after
    checking its exit code (2: bad input) and that no traceback was printed."""
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]
