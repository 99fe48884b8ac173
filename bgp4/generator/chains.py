"""The state of annealed samples (`Chains`) and where a refinement keeps it between levels
(`ChainStore`), so that a killed refinement resumes exactly where it stopped.

Chains live in a generator's latent space (`bgp4.generator.refine`); a saved state is a plain
dict of numpy arrays (an npz file), with the state of the batch's random generator beside it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bgp4._io import atomic_write
from bgp4.generator.targets import Evaluation
from bgp4.stage import changed

__all__ = ["ChainStore", "Chains"]


class Chains:
    """State of N annealed samples: z (N, d), cached target values, log weights, level done, statistics.

    `state_dict()` / `Chains.from_state` give a plain dict of numpy arrays (for an npz checkpoint).
    """

    ARRAYS = ("z", "log_base", "log_ratio", "grad_base", "grad_ratio", "log_w", "ancestor")

    def __init__(self, z: torch.Tensor, ev: Evaluation, levels: int):
        self.z, self.log_base, self.log_ratio = z.detach(), ev.log_base, ev.log_ratio
        self.grad_base, self.grad_ratio = ev.grad_base, ev.grad_ratio
        self.aux = dict(ev.aux)
        self.log_w = torch.zeros(len(z), dtype=torch.float64, device=z.device)
        self.ancestor = torch.arange(len(z), device=z.device)
        self.level = 0
        self.acceptance = np.full(levels, np.nan)
        self.independence_acceptance = np.full(levels, np.nan)
        self.n_evals = len(z)
        self.resampled = np.zeros(levels, dtype=bool)
        self.finished = False

    def take(self, rows: torch.Tensor, z: torch.Tensor, ev: Evaluation, sub: torch.Tensor) -> None:
        """Store z and the entries `sub` (mask) of the evaluation `ev` at the row indices `rows`."""
        self.z[rows] = z
        for name in ("log_base", "log_ratio", "grad_base", "grad_ratio"):
            if (mine := getattr(self, name)) is not None:  # no gradients are kept without HMC moves
                mine[rows] = getattr(ev, name)[sub].to(mine.dtype)
        for k, v in ev.aux.items():
            self.aux[k][rows] = v[sub].to(self.aux[k].dtype)

    def live_rows(self) -> torch.Tensor:
        """Indices of the samples that still move: finite weight and finite target."""
        return torch.nonzero(torch.isfinite(self.log_w) & torch.isfinite(self.log_ratio)).squeeze(1)

    def reorder(self, idx: torch.Tensor) -> None:
        for name in self.ARRAYS:
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name)[idx])
        self.aux = {k: v[idx] for k, v in self.aux.items()}

    def state_dict(self) -> dict[str, np.ndarray]:
        # the gradients are None when there are no levels (K = 0: nothing moves)
        out = {name: v.cpu().numpy() for name in self.ARRAYS if (v := getattr(self, name)) is not None}
        out.update({f"aux_{k}": v.cpu().numpy() for k, v in self.aux.items()})
        out.update(
            level=np.array(self.level),
            acceptance=self.acceptance,
            n_evals=np.array(self.n_evals),
            independence_acceptance=self.independence_acceptance,
            resampled=self.resampled,
            finished=np.array(self.finished),
        )
        return out

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], device: torch.device | str = "cpu") -> Chains:
        self = cls.__new__(cls)
        for name in cls.ARRAYS:
            setattr(self, name, torch.as_tensor(np.array(state[name])).to(device) if name in state else None)
        self.aux = {k[4:]: torch.as_tensor(np.array(v)).to(device) for k, v in state.items() if k.startswith("aux_")}
        self.level, self.n_evals = int(state["level"]), int(state["n_evals"])
        self.acceptance, self.resampled = np.array(state["acceptance"]), np.array(state["resampled"])
        self.independence_acceptance = np.array(
            state.get("independence_acceptance", np.full(len(self.acceptance), np.nan))
        )
        self.finished = bool(state["finished"])
        if self.ancestor is None and not self.resampled.any():  # a state saved before lineages were kept
            self.ancestor = torch.arange(len(self.z), device=self.z.device)
        return self


class ChainStore:
    """A refinement's partial state under `path`: `plan.json` (the request's settings record and the
    tuned step sizes) and each batch's chains after every level (`batch-00000.npz`, ...)."""

    PLAN = "plan.json"

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def plan(self) -> dict[str, Any] | None:
        """{"record", "step_sizes", "pilot_evals"} of the partial refinement, None when there is none."""
        path = self.path / self.PLAN
        return json.loads(path.read_text()) if path.exists() else None

    def changes(self, record: dict[str, Any]) -> list[str] | None:
        """The settings in which the partial refinement differs from `record`; None when there is none."""
        plan = self.plan()
        return None if plan is None else changed(plan["record"], record)

    def save_plan(self, record: dict[str, Any], step_sizes: np.ndarray, pilot_evals: int) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        payload = {"record": record, "step_sizes": np.asarray(step_sizes).tolist(), "pilot_evals": int(pilot_evals)}
        atomic_write(self.path / self.PLAN, json.dumps(payload))

    def _batch(self, i: int) -> Path:
        return self.path / f"batch-{i:05d}.npz"

    def load(self, i: int) -> dict[str, np.ndarray] | None:
        """The saved state of batch `i` (chains and its generator's "rng"), None when none was saved."""
        return dict(np.load(self._batch(i))) if self._batch(i).exists() else None

    def save(self, i: int, state: dict[str, np.ndarray]) -> None:
        """Replace the saved state of batch `i` atomically: a kill never leaves half a state file."""

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a name
                np.savez(f, **state)

        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write(self._batch(i), write)

    def clear(self) -> None:
        """Remove the partial state (the refinement finished, or is started again)."""
        if self.path.exists():
            shutil.rmtree(self.path)
