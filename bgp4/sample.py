"""Drawing configurations from a trained generator, with energies and importance weights.

The samples file is an mdtraj HDF5 file: coordinates in nm and `potentialEnergy` in kJ/mol
(+inf where OpenMM could not evaluate a sample), plus per-sample arrays
`log_q` (log density of the flow, nats), `log_w` (log importance weight -u - log q, u in kT at
the data's temperature; -inf where the energy is not finite or the sample left the
internal-coordinate domain, whose log q is not trustworthy), `finite` and `in_domain` flags.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bgp4.errors import InputError
from bgp4.rundir import MODEL, RunDirectory

SAMPLE_EXTRAS = ("log_q", "log_w", "finite", "in_domain")


@dataclass(frozen=True)
class SampleSettings:
    """How many samples, in which batches, on which device, from which seed."""

    n: int = 100_000
    batch: int = 10_000
    device: str = "auto"
    seed: int = 0
    workers: int = 0  # energy-bridge processes; 0: one per core

    def validated(self) -> "SampleSettings":
        if self.n < 1:
            raise InputError(f"--n must be at least 1, got {self.n}")
        if self.batch < 1:
            raise InputError(f"--batch must be at least 1, got {self.batch}")
        if self.workers < 0:
            raise InputError(f"--workers must be >= 0, got {self.workers}")
        if self.seed < 0:
            raise InputError(f"--seed must be >= 0, got {self.seed}")
        return self


def default_samples_path(run: str | Path) -> Path:
    return Path(run) / "samples.h5"


def sample_run(run_path: str | Path, settings: SampleSettings = SampleSettings(), out: str | Path | None = None,
               overwrite: bool = False, progress: bool = True,
               temperature: float | None = None) -> tuple[dict[str, Any], bool]:
    """Sample a finished training run into `out` (default `<run>/samples.h5`).

    Returns (summary, newly_sampled). An existing samples file made with the same settings is
    kept (the stage is complete); one made with other settings needs `overwrite`. The weights
    use the temperature (K) the run recorded; `temperature` is needed only for a run that
    recorded none, and must agree with it otherwise.
    """
    from tqdm.auto import tqdm

    from bgp4.data import read_settings, resolve_temperature, write_trajectory
    from bgp4.energy import OpenMMEnergy
    from bgp4.model import load_generator
    from bgp4.molecule import alanine_dipeptide
    from bgp4.train import resolve_device

    s = settings.validated()
    run = RunDirectory(run_path)
    train_settings = run.settings()
    if not run.complete:
        raise InputError(f"{run.path} holds no finished training run; run `bgp4 train` first")
    out = Path(out) if out is not None else default_samples_path(run.path)
    record = {"kind": "samples", "run": str(run.path.resolve()), "model": train_settings["model"], **asdict(s)}
    record.pop("workers")
    if out.exists() and not overwrite:
        stored = read_settings(out)
        if {k: stored.get(k) for k in record} == record:
            return json.loads(stored.get("summary", "{}")), False
        raise InputError(f"{out} exists with other settings; pass --overwrite to replace it")

    device = resolve_device(s.device)
    bg = load_generator(run.file(MODEL), map_location=device).to(device).eval()
    complete = json.loads(run.file("complete.json").read_text())
    molecule = alanine_dipeptide()
    temperature = resolve_temperature(complete.get("temperature"), temperature, run.file("complete.json"))
    kT = molecule.kT(temperature)
    generator = torch.Generator(device=device).manual_seed(s.seed)
    chunks: list[dict[str, np.ndarray]] = []
    extras: dict[str, list[np.ndarray]] = {k: [] for k in SAMPLE_EXTRAS}
    energies: list[np.ndarray] = []  # kJ/mol, float64 (the file keeps float32)
    with OpenMMEnergy(molecule.system, temperature, n_workers=s.workers or None) as energy, \
            tqdm(total=s.n, desc="sample", unit="sample", disable=not progress) as bar:
        done = 0
        while done < s.n:
            b = min(s.batch, s.n - done)
            with torch.no_grad():
                x, log_q, ok, _ = bg.sample(b, generator=generator)
            x = x.detach().cpu().double().numpy().reshape(b, molecule.n_atoms, 3)
            log_q = log_q.detach().cpu().double().numpy()
            ok = ok.detach().cpu().numpy().astype(bool)
            e = energy.energies_kjmol(x)
            finite = np.isfinite(e) & np.isfinite(x).all(axis=(1, 2)) & np.isfinite(log_q)
            log_w = np.where(finite & ok, -e / kT - log_q, -np.inf)
            chunks.append({"coordinates": x.astype(np.float32), "potentialEnergy": e.astype(np.float32)})
            energies.append(e)
            for name, values in zip(SAMPLE_EXTRAS, (log_q, log_w, finite, ok)):
                extras[name].append(values)
            done += b
            bar.update(b)
    joined = {k: np.concatenate(v) for k, v in extras.items()}
    summary = _summary(np.concatenate(energies) / kT, joined)
    record["summary"] = json.dumps(summary)
    record["temperature"] = temperature
    out.parent.mkdir(parents=True, exist_ok=True)
    write_trajectory(out, molecule.topology, iter(chunks), record, extras=joined)
    return summary, True


def _summary(u: np.ndarray, extras: dict[str, np.ndarray]) -> dict[str, Any]:
    from bgp4.analysis import reverse_ess

    finite = extras["finite"]
    return {
        "samples": int(u.size),
        "nonfinite_energy": int(np.count_nonzero(~finite)),
        "out_of_domain": int(np.count_nonzero(~extras["in_domain"])),
        "mean_energy_kT": float(np.mean(u[finite])) if finite.any() else None,
        "median_energy_kT": float(np.median(u[finite])) if finite.any() else None,
        "reverse_ess": float(reverse_ess(extras["log_w"])),
    }
