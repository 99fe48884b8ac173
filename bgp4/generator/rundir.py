"""A run directory: effective settings, checkpoints, metrics log, final model, completion marker.

Plain files a person can read: `settings.json`, `metrics.jsonl` (one JSON object per line),
`checkpoint.pt` (torch, replaced atomically), `model.pt`, `split.npz` (train/test frame indices),
`complete.json` (written last: its presence means the run is finished).
"""

from __future__ import annotations

import json
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bgp4._io import atomic_write
from bgp4.errors import InputError, first_line
from bgp4.simulation.molecule import check_same_molecule, molecule_of
from bgp4.stage import COMPLETE, DATA, FINGERPRINT, METRICS, SETTINGS, Stage, changed, refuse_changes

__all__ = [
    "CHECKPOINT",
    "COMPLETE",
    "METRICS",
    "MODEL",
    "SETTINGS",
    "SPLIT",
    "RunDirectory",
    "check_init",
    "check_init_molecule",
    "init_summary",
    "run_costs",
]

CHECKPOINT, MODEL, SPLIT = "checkpoint.pt", "model.pt", "split.npz"


class RunDirectory(Stage):
    """Files of one training run under `path`: a `bgp4.stage.Stage` with checkpoints and a model."""

    def prepare(
        self,
        settings: dict[str, Any],
        overwrite: bool,
        changed: Callable[[dict[str, Any], dict[str, Any]], list[str]] = changed,
    ) -> None:
        """Create the directory, or check that an existing run has the same settings.

        changed(previous, current) names the settings that differ (default: `bgp4.stage.changed`
        with no neutral settings); a run with any of them is refused unless `overwrite`.
        """
        if overwrite and self.path.is_dir():
            if any(self.path.iterdir()) and not self.file(SETTINGS).exists():
                raise InputError(
                    f"{self.path} is not a bgp4 run directory; overwrite=True (--overwrite) only replaces runs"
                )
            shutil.rmtree(self.path)
        if self.path.exists() and not self.path.is_dir():
            raise InputError(f"run directory {self.path} is a file")
        previous = self.recorded()
        if previous is not None:
            refuse_changes(
                f"{self.path} holds a run",
                changed(previous, settings),
                "use another out directory (--out) or pass overwrite=True (--overwrite) to start again",
            )
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create run directory {self.path}: {exc.strerror}") from None
        self.record(settings)

    def settings(self) -> dict[str, Any]:
        """The run's settings record; InputError when the directory holds no run."""
        previous = self.recorded()
        if previous is None:
            raise InputError(f"{self.path} is not a bgp4 run directory (no {SETTINGS})")
        return previous

    def save_torch(self, name: str, payload: Any) -> None:
        """torch.save to a temporary name, then rename: a kill never leaves half a file."""
        atomic_write(self.file(name), lambda tmp: torch.save(payload, tmp))

    def signature(self, name: str) -> tuple[int, ...]:
        """(inode, mtime in ns, size) of a file: changes whenever it is replaced."""
        stat = self.file(name).stat()
        return stat.st_ino, stat.st_mtime_ns, stat.st_size

    def save_split(self, train: np.ndarray, test: np.ndarray) -> None:
        """The train/test frame indices, as `split.npz` with arrays `train` and `test`."""

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a name
                np.savez(f, train=train, test=test)

        atomic_write(self.file(SPLIT), write)

    def load_torch(self, name: str, map_location: str | torch.device = "cpu") -> Any:
        """A file written by `save_torch`: tensors, numbers, strings, lists and dicts only (weights_only)."""
        try:
            return torch.load(self.file(name), map_location=map_location, weights_only=True)
        except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as err:
            reason = first_line(err, 120)
            raise InputError(
                f"{self.file(name)} is damaged ({reason}); pass overwrite=True (--overwrite) to start again"
            ) from err

    def truncate_log(self, step: int) -> None:
        """Drop records written after global step `step` (they are redone after a resume), and a
        line cut off by a kill (the next record would be appended to it)."""
        kept = "".join(json.dumps(r) + "\n" for r in self.records() if r.get("global_step", 0) <= step)
        path = self.file(METRICS)
        if not path.exists() or path.read_text() != kept:
            atomic_write(path, kept)


# what a run started from another (--init) must share with it: the architecture and z-matrix, and the
# split settings (seed, test fraction), so that the fitted coordinate transform stays valid; its data
# file may differ (its frames are mapped by that transform)
INIT_MUST_MATCH = ("model", "blocks", "hidden", "bins", "fix_constrained", "zmatrix", "seed", "test_fraction")
# without MD data there is no split to keep: the architecture alone
_INIT_ARCHITECTURE = INIT_MUST_MATCH[:-2]
# the value of a setting a run of an older version did not record
_INIT_DEFAULTS = {"zmatrix": "hand"}


def check_init(init: str | Path, record: dict[str, Any], data: bool = True) -> None:
    """Refuse (InputError) to start the run with settings `record` from the run directory `init`
    unless that run is finished and has the same architecture, and (`data`: the run has MD data)
    the same train/test split."""
    source = RunDirectory(init)
    if not source.complete or not source.file(MODEL).is_file():
        raise InputError(f"init={init} (--init): not a finished bgp4 training run (no {COMPLETE} or {MODEL})")
    previous = source.settings()
    if not data:  # no data of its own: nothing to compare the other run's data with
        previous, record = ({k: v for k, v in r.items() if k not in (DATA, FINGERPRINT)} for r in (previous, record))
    keys = INIT_MUST_MATCH if data else _INIT_ARCHITECTURE
    differ = changed(previous, record, keys=keys, defaults=_INIT_DEFAULTS)
    if differ:
        raise InputError(
            f"init={init} (--init) was trained with another {', '.join(differ)}; "
            "a run can only start from one with the same architecture, z-matrix and split settings"
        )


def init_summary(init: str | Path) -> dict[str, Any]:
    """The summary (complete.json) of the finished run `init`."""
    return RunDirectory(init).completion()


def run_costs(path: str | Path) -> dict[str, int]:
    """Target energy evaluations and MD frames a finished run cost, with those of the runs it
    started from: {"energy_evaluations_total", "md_frames_total"}. A run of an older version
    recorded neither frames nor totals: its frames are its training frames (split.npz) when it
    trained a likelihood term, and its own evaluations count alone."""
    run = RunDirectory(path)
    summary, settings = run.completion(), run.settings()
    frames = summary.get("md_frames")
    if frames is None:
        likelihood = settings.get("steps", 0) > 0 or settings.get("energy_steps", 0) > 0  # mixed, then
        frames = len(np.load(run.file(SPLIT))["train"]) if likelihood and run.file(SPLIT).is_file() else 0
    return {
        "energy_evaluations_total": int(summary.get("energy_evaluations_total", summary.get("energy_evaluations", 0))),
        "md_frames_total": int(summary.get("md_frames_total", frames)),
    }


def check_init_molecule(init: str | Path, molecule):
    """Refuse (InputError) to start a run of `molecule` (its data's) from the run `init` of another
    molecule or system (`check_same_molecule`); returns `molecule`, or without one (None: no data)
    the init model's."""
    path = RunDirectory(init).file(MODEL)
    try:
        config = torch.load(path, map_location="cpu", weights_only=True)["config"]
    except (RuntimeError, EOFError, OSError, KeyError, TypeError, pickle.UnpicklingError) as err:
        raise InputError(f"init={init} (--init): its {MODEL} cannot be read ({type(err).__name__})") from None
    try:
        theirs = molecule_of(config, source=path)  # a model of an older version names none: the default
    except InputError as err:
        raise InputError(f"init={init} (--init): {err}") from None
    if molecule is None:
        return theirs
    check_same_molecule(molecule, theirs, what=f"the data and init={init} (--init)")
    return molecule
