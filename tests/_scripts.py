"""Scripts under run/ (reproduction scripts, benches, checks) are not part of the package: tests
import them by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["load_script"]

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """Import the script at `relative` (from the repository root, e.g. "run/scripts/metad_phi.py")."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
