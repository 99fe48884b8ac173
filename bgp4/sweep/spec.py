"""What one run of a sweep is (`RunSpec`) and the files a sweep writes into a run directory.

A leaf of `bgp4.sweep`: the planner, the dispatch and the worker tasks all read it, and it reads
none of them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bgp4.settings import EXECUTION_ONLY, RefineSettings, SampleSettings, TrainSettings
from bgp4.stage import Stage, changed

__all__ = [
    "RunSpec",
    "run_name",
    "DONE_FILE",
    "LOG_FILE",
    "LOCK_FILE",
    "TASKS_FILE",
]

DONE_FILE = "sweep-done.json"
LOG_FILE = "log.txt"
LOCK_FILE = "run.lock"
TASKS_FILE = "sweep-tasks.jsonl"
#: The settings a finished run's marker records, one record each (refine: {} when not refined).
PARTS = ("train", "sample", "refine")
_RECORDS = {"train": TrainSettings, "sample": SampleSettings, "refine": RefineSettings}


@dataclass(frozen=True)
class RunSpec:
    """One (model, seed) run, or (model, objective, seed) in a sweep over objectives: where it lives
    and everything its task needs (plain, picklable). `label` names its variant in the report:
    the model, or "<model>-<objective>" when the sweep compares objectives ("" : the model).
    `refine`: the `RefineSettings` of its AIS refinement after sampling, {} for none."""

    name: str
    model: str
    seed: int
    path: str
    train: dict[str, Any]
    sample: dict[str, Any]
    threads: int
    gpus: float
    label: str = ""
    refine: dict[str, Any] = field(default_factory=dict)

    @property
    def variant(self) -> str:
        """What the aggregate report compares: the label, else the model."""
        return self.label or self.model

    @property
    def done(self) -> bool:
        """Trained, sampled and analyzed with these settings (execution-only ones aside) by an
        earlier task: the marker `sweep-done.json` holds the settings it was made with."""
        try:
            stored = self.stage().completion()
        except ValueError:  # a marker that is not JSON: not done
            return False
        if not stored:
            return False
        return not any(_changed(part, stored.get(part, {}), getattr(self, part)) for part in PARTS)

    def stage(self) -> Stage:
        """The run directory as a stage whose completion marker is `sweep-done.json`."""
        return Stage(self.path, complete=DONE_FILE)


def _changed(part: str, stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The settings of `part` that differ; a setting newer than a stored record takes its default
    (an empty record, as an unrefined run's, stays empty)."""
    defaults = asdict(_RECORDS[part]()) if stored else {}
    return changed(stored, current, neutral=EXECUTION_ONLY, defaults=defaults)


def run_name(variant: str, seed: int) -> str:
    """The run directory's name: "<model>-s<seed>", or "<model>-<objective>-s<seed>"."""
    return f"{variant}-s{seed}"
