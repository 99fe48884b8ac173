"""The command line of a Python child process that runs this very bgp4.

A child started as `python -m bgp4...` or `python -c ...` would import whichever bgp4 its working
directory or sys.path offers first: a checkout in the cwd, another install. The MD replicas, the
energy workers and a sweep's `bgp4 simulate` start theirs through `python_command`, which keeps the
cwd off sys.path (`-P`, Python 3.11+) and puts the directory that holds this bgp4 first on
PYTHONPATH.

>>> argv, env = python_command("-m", "bgp4.cli", "--help")
>>> argv[-3:], env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(__file__).resolve().parents[1])
(['-m', 'bgp4.cli', '--help'], True)
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

__all__ = ["die_with_parent", "python_command"]


def python_command(*args: str) -> tuple[list[str], dict[str, str]]:
    """argv (`sys.executable`, -P, then `args`) and environment of a child that imports this bgp4,
    whatever the cwd, sys.path or install mode."""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []  # keeps the cwd (and any bgp4/ there) off sys.path
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[1])  # the directory that holds bgp4/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return [sys.executable, *safe_path, *args], env


def die_with_parent(parent_pid: int | None = None) -> bool:
    """Ask Linux to kill this process when its parent dies (even by SIGKILL); elsewhere a no-op.

    With `parent_pid`, returns False when the parent has already died (before the request took
    effect), so the child can exit at once; True otherwise.
    """
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    return parent_pid is None or os.getppid() == parent_pid
