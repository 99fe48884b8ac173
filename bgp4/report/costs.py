"""The field's table, a run's side of it: the forward ESS on MD frames the run did not train on,
and what the generator and its MD data cost (target energy evaluations, MD steps).

The forward ESS needs the generator's log density of MD frames, which the samples files do not
hold: it is computed here from the run's `model.pt` on at most FORWARD_FRAMES frames (a seeded
choice) that training never saw: the frames the run held out (its `split.npz`) when the data file
is the one it trained on (by content, `bgp4.stage.same_data`), else any of the file's frames.
Energies in kT, log q in nats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from bgp4.analysis.weights import forward_ess
from bgp4.generator.model import load_generator
from bgp4.generator.rows import by_rows
from bgp4.generator.rundir import MODEL, SPLIT
from bgp4.simulation.data import md_energy_evaluations, md_steps_per_frame

__all__ = [
    "FORWARD_FRAMES",
    "cost_metrics",
    "forward_frames",
    "forward_metrics",
    "held_out_log_q",
]

#: MD frames at most on which the forward ESS is computed (seeded choice).
FORWARD_FRAMES = 10_000


def _choose(frames: np.ndarray, seed: int, n: int) -> np.ndarray:
    """At most `n` of `frames` (indices), a seeded choice, in increasing order."""
    return np.sort(frames[np.random.default_rng(seed).permutation(frames.size)[:n]])


def forward_frames(
    run: str | Path, n_frames: int, same_data: bool, seed: int = 0, n: int = FORWARD_FRAMES
) -> tuple[np.ndarray, str | None]:
    """(frame indices (m,), note) of the data file (`n_frames` frames) to compute the run's
    forward ESS on: at most `n` of the frames the run held out (its split's test frames) when the
    file is its training data (`same_data`); else at most `n` of all the file's frames, which are
    independent of training, with a note that says so. A split that names frames beyond the file
    cannot be its own: the file counts as other data then. Raises FileNotFoundError when the data
    is the run's and the run has no split."""
    run = Path(run)
    if same_data:
        test = np.load(run / SPLIT)["test"]
        if test.size == 0 or int(test.max()) < n_frames:
            return _choose(test, seed, n), None
        why = f"the run's {SPLIT} names frame {int(test.max())}, beyond the data file's {n_frames}"
    else:
        why = "the data file is not the run's training data (another data fingerprint)"
    frames = _choose(np.arange(n_frames), seed, n)
    return frames, f"{why}: its frames are independent of training; {frames.size} of its {n_frames}, a seeded choice"


def _has_inputs(run: Path, same_data: bool) -> bool:
    """Whether the run has what its forward ESS needs: a model, and a split when the data is its own."""
    return (run / MODEL).is_file() and (not same_data or (run / SPLIT).is_file())


def _log_q(run: Path, xyz: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """log q (m,) float64 nats of `xyz[frames]` under the run's generator (`BoltzmannGenerator.log_prob`,
    on the CPU, no gradients); nan where it is not finite."""
    bg = load_generator(run / MODEL, map_location="cpu").eval()
    with torch.no_grad():
        log_q = by_rows(bg.log_prob, torch.as_tensor(xyz[frames])).double().numpy()
    return np.where(np.isfinite(log_q), log_q, np.nan)


def held_out_log_q(run: str | Path, xyz: np.ndarray, seed: int = 0, n: int = FORWARD_FRAMES, same_data: bool = True):
    """(frame indices (m,), log q (m,) float64 nats) of the frames of `xyz` (the MD data,
    (n_frames, n_atoms, 3) nm) that `forward_frames` chooses; None without a model, or without a
    split when the data is the run's. log q is nan where it is not finite."""
    run = Path(run)
    if not _has_inputs(run, same_data):
        return None
    frames, _ = forward_frames(run, len(xyz), same_data, seed, n)
    return frames, _log_q(run, xyz, frames)


def forward_metrics(
    run: str | Path, xyz: np.ndarray, u_kT: np.ndarray, weights_defined: bool, seed: int = 0, same_data: bool = True
) -> dict[str, Any]:
    """{forward_ess, forward_ess_frames, forward_ess_nonfinite_log_q, forward_ess_note} of a run:
    `forward_ess` of the log weights -u - log q of MD frames it did not train on (`forward_frames`;
    u_kT (n_frames,): the MD data's reduced energies, `same_data`: whether the data file is the
    run's training data). A frame with a non-finite log q (counted) makes the ESS 0.

    None (with the note saying why) where the importance weights are not defined or the run has
    no model file, or no split while the data is its own.
    """
    keys = ("forward_ess", "forward_ess_frames", "forward_ess_nonfinite_log_q", "forward_ess_note")
    empty: dict[str, Any] = dict.fromkeys(keys)
    if not weights_defined:
        return empty | {"forward_ess_note": "importance weights are not defined for this run"}
    run = Path(run)
    if not _has_inputs(run, same_data):
        return empty | {"forward_ess_note": f"the run has no {SPLIT} or {MODEL}"}
    frames, note = forward_frames(run, len(xyz), same_data, seed)
    if frames.size == 0:
        return empty | {"forward_ess_note": "the run held out no MD frames"}
    log_q = _log_q(run, xyz, frames)
    ess = forward_ess(-np.asarray(u_kT, dtype=np.float64)[frames] - log_q)
    return empty | {
        "forward_ess": ess if np.isfinite(ess) else None,
        "forward_ess_frames": int(frames.size),
        "forward_ess_nonfinite_log_q": int(np.count_nonzero(np.isnan(log_q))),
        "forward_ess_note": note,
    }


def cost_metrics(
    complete: dict[str, Any],
    run_settings: dict[str, Any],
    data_settings: dict[str, Any],
    n_train_frames: int | None,
    n_samples: int,
    evals_per_sample: float,
    n_data_frames: int | None = None,
) -> dict[str, Any]:
    """What one samples file's generator cost, as the field counts it, and its MD data.

    Keys: train_energy_evaluations (target energy evaluations of training, with the runs it started
    from: `energy_evaluations_total` of complete.json, else `energy_evaluations`),
    sample_energy_evaluations (n_samples * evals_per_sample: one per flow sample, every AIS level's
    for refined samples), energy_evaluations_total (their sum); md_energy_evaluations (the MD steps
    of the whole data file of `n_data_frames` frames, equilibration included: `md_energy_evaluations`),
    train_md_frames (the MD frames the losses drew from: complete.json's `md_frames_total` /
    `md_frames`; runs that predate the count trained by likelihood on all `n_train_frames`) and
    train_md_frames_energy_evaluations (those frames times `md_steps_per_frame`). None where unknown.
    """
    train = complete.get("energy_evaluations_total", complete.get("energy_evaluations"))
    frames = complete.get("md_frames_total", complete.get("md_frames"))
    if frames is None and int(run_settings.get("steps") or 0) > 0:
        frames = n_train_frames
    sample = int(round(n_samples * float(evals_per_sample)))
    per_frame = md_steps_per_frame(data_settings)
    return {
        "train_energy_evaluations": None if train is None else int(train),
        "sample_energy_evaluations": sample,
        "energy_evaluations_total": None if train is None else int(train) + sample,
        "md_energy_evaluations": None if n_data_frames is None else md_energy_evaluations(data_settings, n_data_frames),
        "train_md_frames": None if frames is None else int(frames),
        "train_md_frames_energy_evaluations": None if frames is None or per_frame is None else int(frames) * per_frame,
    }
