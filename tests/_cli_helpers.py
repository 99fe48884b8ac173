"""Helpers of the command-line tests: the one line a refused command writes."""

from __future__ import annotations

__all__ = ["_one_line_error"]


def _one_line_error(result, code: int = 2) -> str:
    """The one stderr line of a refused command (an in-process `cli` result or a subprocess), after
    checking its exit code (2: bad input) and that no traceback was printed."""
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]
