"""The field's table, a run's side of it: the forward ESS on held-out MD frames and what the
generator cost (target energy evaluations, MD frames).

The forward ESS needs the generator's log density of MD frames, which the samples files do not
hold: it is computed here from the run's `model.pt` on at most FORWARD_FRAMES of the frames the
run held out from training (its `split.npz`), a seeded choice. Energies in kT, log q in nats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from bgp4.analysis.weights import forward_ess
from bgp4.generator.model import load_generator
from bgp4.generator.rundir import MODEL, SPLIT

__all__ = ["FORWARD_BATCH", "FORWARD_FRAMES", "cost_metrics", "forward_metrics", "held_out_log_q", "md_steps_per_frame"]

#: Held-out MD frames at most on which the forward ESS is computed (seeded choice).
FORWARD_FRAMES = 10_000
#: Frames per batch through the generator's inverse.
FORWARD_BATCH = 2048


def held_out_log_q(run: str | Path, xyz: np.ndarray, seed: int = 0, n: int = FORWARD_FRAMES):
    """(frame indices (m,), log q (m,) float64 nats) of at most `n` of the run's held-out frames of
    `xyz` (the MD data, (n_frames, n_atoms, 3) nm), chosen with `seed`; None without a split or model.

    log q is the run's generator's density (`BoltzmannGenerator.log_prob`, on the CPU, no gradients);
    nan where it is not finite.
    """
    run = Path(run)
    if not (run / SPLIT).is_file() or not (run / MODEL).is_file():
        return None
    test = np.load(run / SPLIT)["test"]
    pick = np.sort(test[np.random.default_rng(seed).permutation(test.size)[:n]])
    bg = load_generator(run / MODEL, map_location="cpu").eval()
    with torch.no_grad():
        parts = [
            bg.log_prob(torch.as_tensor(xyz[chunk])).double().numpy()
            for chunk in np.array_split(pick, max(1, -(-pick.size // FORWARD_BATCH)))
        ]
    log_q = np.concatenate(parts) if parts else np.zeros(0)
    return pick, np.where(np.isfinite(log_q), log_q, np.nan)


def forward_metrics(
    run: str | Path, xyz: np.ndarray, u_kT: np.ndarray, weights_defined: bool, seed: int = 0
) -> dict[str, Any]:
    """{forward_ess, forward_ess_frames, forward_ess_note} of a run: `forward_ess` of the log
    weights -u - log q of its held-out frames (u_kT (n_frames,): the MD data's reduced energies).

    None (with the note saying why) where the importance weights are not defined or the run has
    no split or model file.
    """
    empty = {"forward_ess": None, "forward_ess_frames": None, "forward_ess_note": None}
    if not weights_defined:
        return empty | {"forward_ess_note": "importance weights are not defined for this run"}
    held_out = held_out_log_q(run, xyz, seed)
    if held_out is None:
        return empty | {"forward_ess_note": f"the run has no {SPLIT} or {MODEL}"}
    frames, log_q = held_out
    if frames.size == 0:
        return empty | {"forward_ess_note": "the run held out no MD frames"}
    ess = forward_ess(-np.asarray(u_kT, dtype=np.float64)[frames] - log_q)
    return empty | {"forward_ess": ess if np.isfinite(ess) else None, "forward_ess_frames": int(frames.size)}


def md_steps_per_frame(data_settings: dict[str, Any]) -> int | None:
    """MD integration steps (one force evaluation each) behind one frame of the data: `save_every`,
    times the number of temperatures for replica exchange (every walker steps between two frames
    of the lowest one); None where the data records no `save_every`."""
    save_every = data_settings.get("save_every")
    if not save_every:
        return None
    return int(save_every) * max(1, len(data_settings.get("temperatures") or ()))


def cost_metrics(
    complete: dict[str, Any],
    run_settings: dict[str, Any],
    data_settings: dict[str, Any],
    n_train_frames: int | None,
    n_samples: int,
    evals_per_sample: float,
) -> dict[str, Any]:
    """What one samples file's generator cost, as the field counts it (MD frames apart).

    Keys: train_energy_evaluations (target energy evaluations of training, with the runs it started
    from: `energy_evaluations_total` of complete.json, else `energy_evaluations`),
    sample_energy_evaluations (n_samples * evals_per_sample: one per flow sample, every AIS level's
    for refined samples), energy_evaluations_total (their sum), train_md_frames (the MD frames the
    losses drew from: complete.json's `md_frames_total` / `md_frames`; runs that predate the count
    trained by likelihood on all `n_train_frames`) and md_energy_evaluations (those frames times
    `md_steps_per_frame`; equilibration not counted). None where unknown.
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
        "train_md_frames": None if frames is None else int(frames),
        "md_energy_evaluations": None if frames is None or per_frame is None else int(frames) * per_frame,
    }
