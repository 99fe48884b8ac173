"""What one run of a sweep is (`RunSpec`) and the files a sweep writes into a run directory.

A leaf of `bgp4.sweep`: the planner, the dispatch and the worker tasks all read it, and it reads
none of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "RunSpec",
    "run_name",
    "without_execution",
    "EXECUTION_ONLY",
    "DONE_FILE",
    "LOG_FILE",
    "LOCK_FILE",
    "TASKS_FILE",
]

DONE_FILE = "sweep-done.json"
LOG_FILE = "log.txt"
LOCK_FILE = "run.lock"
TASKS_FILE = "sweep-tasks.jsonl"
#: Settings that say how a run is executed, not what it computes: a resumed sweep may change them.
EXECUTION_ONLY = ("workers",)


@dataclass(frozen=True)
class RunSpec:
    """One (model, seed) run: where it lives and everything its task needs (plain, picklable)."""

    name: str
    model: str
    seed: int
    path: str
    train: dict[str, Any]
    sample: dict[str, Any]
    threads: int
    gpus: float

    @property
    def done(self) -> bool:
        """Trained, sampled and analyzed with exactly these settings by an earlier task."""
        marker = Path(self.path) / DONE_FILE
        if not marker.exists():
            return False
        try:
            stored = json.loads(marker.read_text())
        except ValueError:
            return False
        return without_execution(stored.get("train", {})) == without_execution(self.train) and without_execution(
            stored.get("sample", {})
        ) == without_execution(self.sample)


def without_execution(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k not in EXECUTION_ONLY}


def run_name(model: str, seed: int) -> str:
    return f"{model}-s{seed}"
