"""Drawing configurations from a trained generator, with energies and importance weights.

The samples file is an mdtraj HDF5 file: coordinates in nm and `potentialEnergy` in kJ/mol
(+inf where OpenMM could not evaluate a sample), plus per-sample arrays
`log_q` (log density of the flow, nats), `log_w` (log importance weight -u - log q, u in kT at
the data's temperature; -inf where the energy is not finite or the sample left the
internal-coordinate domain, whose log q is not trustworthy), `finite` and `in_domain` flags.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bgp4._io import atomic_write
from bgp4.errors import InputError
from bgp4.generator.rundir import MODEL, RunDirectory
from bgp4.platform import resolve_device
from bgp4.settings import RefineSettings, SampleSettings  # noqa: F401 - part of this module's API

SAMPLE_EXTRAS = ("log_q", "log_w", "finite", "in_domain")
#: Refined files also hold each sample's SMC lineage (the starting sample it descends from).
REFINED_EXTRAS = SAMPLE_EXTRAS + ("ancestor",)


def default_samples_path(run: str | Path) -> Path:
    return Path(run) / "samples.h5"


def latent_batches(bg, s: SampleSettings) -> Iterator[torch.Tensor]:
    """The prior draws z (b, n_dims) of each batch, from one generator seeded with s.seed.

    Raw sampling and refinement share them, so refined samples start from the raw ones.
    """
    gen = torch.Generator(device=bg.device).manual_seed(s.seed)
    for start in range(0, s.n, s.batch):
        yield bg.sample_latent(min(s.batch, s.n - start), generator=gen).to(bg.device)


def sample_run(
    run_path: str | Path,
    settings: SampleSettings = SampleSettings(),
    out: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
    temperature: float | None = None,
) -> tuple[dict[str, Any], bool]:
    """Sample a finished training run into `out` (default `<run>/samples.h5`).

    Returns (summary, newly_sampled). An existing samples file made with the same settings is
    kept (the stage is complete); one made with other settings needs `overwrite`. The weights
    use the temperature (K) the run recorded; `temperature` is needed only for a run that
    recorded none, and must agree with it otherwise.
    """
    from tqdm.auto import tqdm

    from bgp4.generator.model import load_generator
    from bgp4.simulation.data import read_settings, resolve_temperature, write_trajectory
    from bgp4.simulation.energy import OpenMMEnergy

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
    molecule = bg.molecule()
    temperature = resolve_temperature(complete.get("temperature"), temperature, run.file("complete.json"))
    kT = molecule.kT(temperature)
    latents = latent_batches(bg, s)
    chunks: list[dict[str, np.ndarray]] = []
    extras: dict[str, list[np.ndarray]] = {k: [] for k in SAMPLE_EXTRAS}
    energies: list[np.ndarray] = []  # kJ/mol, float64 (the file keeps float32)
    with (
        OpenMMEnergy(molecule.system, temperature, n_workers=s.workers or None) as energy,
        tqdm(total=s.n, desc="sample", unit="sample", disable=not progress) as bar,
    ):
        done = 0
        while done < s.n:
            b = min(s.batch, s.n - done)
            with torch.no_grad():
                x, log_q, ok, _ = bg.generate(next(latents))
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
    summary = _summary(np.concatenate(energies) / kT, joined, complete.get("weights_defined", False))
    record["summary"] = json.dumps(summary)
    record["temperature"] = temperature
    record["molecule"] = molecule.name
    out.parent.mkdir(parents=True, exist_ok=True)
    write_trajectory(out, molecule.topology, iter(chunks), record, extras=joined)
    return summary, True


def _summary(u: np.ndarray, extras: dict[str, np.ndarray], weights_defined: bool) -> dict[str, Any]:
    """Counts and energies (kT) of a samples file; reverse ESS only where weights are defined, else None."""
    from bgp4.analysis.weights import reverse_ess

    finite = extras["finite"]
    return {
        "samples": int(u.size),
        "nonfinite_energy": int(np.count_nonzero(~finite)),
        "out_of_domain": int(np.count_nonzero(~extras["in_domain"])),
        "mean_energy_kT": float(np.mean(u[finite])) if finite.any() else None,
        "median_energy_kT": float(np.median(u[finite])) if finite.any() else None,
        "reverse_ess": float(reverse_ess(extras["log_w"])) if weights_defined is True else None,
    }


# --------------------------------------------------------------------------- refinement (AIS)


def refined_path(samples_path: str | Path) -> Path:
    """`RUN/samples.h5` -> `RUN/samples-refined.h5`."""
    p = Path(samples_path)
    return p.with_name(p.stem + "-refined" + p.suffix)


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a name
            np.savez(f, **arrays)

    atomic_write(path, write)  # a kill never leaves half a state file


def refine_run(
    run_path: str | Path,
    settings: SampleSettings,
    refine: RefineSettings,
    out: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> tuple[dict[str, Any], bool]:
    """Refine the raw samples of `sample_run` (same n, batch, seed: the same prior draws) by AIS.

    Writes `<samples>-refined.h5` (same format; log_w the AIS weights; settings hold betas, step
    sizes, acceptance per level of the MALA/HMC and of the independence moves, and energy
    evaluations). Each batch's chains are saved after every
    level under `<samples>-refined.state/`, so a killed run resumes losing at most one level.
    Returns (summary, newly_refined).
    """
    import shutil
    import time

    from tqdm.auto import tqdm

    from bgp4.generator.model import load_generator
    from bgp4.generator.refine import Chains, GeneratorTarget, run_levels, schedule, start, tune_step_sizes
    from bgp4.simulation.data import read_settings, resolve_temperature, write_trajectory
    from bgp4.simulation.energy import OpenMMEnergy

    s, r = settings.validated(), refine.validated()
    run = RunDirectory(run_path)
    train_settings = run.settings()
    if not run.complete:
        raise InputError(f"{run.path} holds no finished training run; run `bgp4 train` first")
    out = refined_path(out if out is not None else default_samples_path(run.path))
    record = {
        "kind": "refined-samples",
        "run": str(run.path.resolve()),
        "model": train_settings["model"],
        **asdict(s),
        **{f"refine_{k}": v for k, v in asdict(r).items()},
    }
    record.pop("workers")
    state_dir = out.with_name(out.stem + ".state")
    if out.exists() and not overwrite:
        stored = read_settings(out)
        if {k: stored.get(k) for k in record} == record:
            return json.loads(stored.get("summary", "{}")), False
        raise InputError(f"{out} exists with other settings; pass --overwrite to replace it")
    plan_file = state_dir / "plan.json"
    if plan_file.exists() and json.loads(plan_file.read_text())["record"] != record:
        if not overwrite:
            raise InputError(f"{state_dir} holds a partial refinement with other settings; pass --overwrite")
        shutil.rmtree(state_dir)

    started = time.perf_counter()
    device = resolve_device(s.device)
    bg = load_generator(run.file(MODEL), map_location=device).to(device).eval()
    for p in bg.parameters():
        p.requires_grad_(False)  # gradients are wanted in z only
    complete = json.loads(run.file("complete.json").read_text())
    molecule = bg.molecule()
    temperature = resolve_temperature(complete.get("temperature"), None, run.file("complete.json"))
    kT = molecule.kT(temperature)
    betas = schedule(r.levels, r.power)
    state_dir.mkdir(parents=True, exist_ok=True)
    results: list[Chains] = []
    with OpenMMEnergy(molecule.system, temperature, n_workers=s.workers or None) as energy:
        target = GeneratorTarget(bg, energy)
        if plan_file.exists():
            plan = json.loads(plan_file.read_text())
        else:
            sizes, pilot_evals = tune_step_sizes(
                target, betas, r.steps, r.leapfrog, n=min(r.pilot, s.n), seed=s.seed + 1, independence=r.independence
            )
            plan = {"record": record, "step_sizes": sizes.tolist(), "pilot_evals": pilot_evals}
            atomic_write(plan_file, json.dumps(plan))
        sizes = np.asarray(plan["step_sizes"], dtype=np.float64)
        batches = list(latent_batches(bg, s))
        per_batch = max(r.levels, 1)
        with tqdm(
            total=len(batches) * per_batch, desc=f"refine K={r.levels}", unit="level", disable=not progress
        ) as bar:
            for i, z0 in enumerate(batches):
                path = state_dir / f"batch-{i:05d}.npz"
                gen = torch.Generator()
                if path.exists():
                    state = dict(np.load(path))
                    chains = Chains.from_state(state, device)
                    gen.set_state(torch.from_numpy(state["rng"]))
                else:
                    gen.manual_seed(int(np.random.SeedSequence([s.seed, i]).generate_state(1)[0]))
                    chains = start(target, z0, r.levels, r.steps)

                def save(c: Chains, i: int = i, path: Path = path, gen: torch.Generator = gen) -> None:
                    _save_npz(path, {**c.state_dict(), "rng": gen.get_state().numpy()})
                    bar.n = i * per_batch + (c.level if r.levels else int(c.finished))
                    bar.refresh()

                if not chains.finished:
                    run_levels(
                        target,
                        chains,
                        betas,
                        sizes,
                        r.steps,
                        r.leapfrog,
                        gen,
                        r.resample_ess,
                        on_level=save,
                        independence=r.independence,
                    )
                save(chains)
                results.append(chains)

    z = torch.cat([c.z for c in results])
    with torch.no_grad():
        x = torch.cat([bg.generate(c.z).x for c in results]).cpu().double().numpy()
    u = torch.cat([c.aux["u"] for c in results]).cpu().numpy()
    log_q = torch.cat([c.aux["log_q"] for c in results]).cpu().numpy()
    ok = torch.cat([c.aux["ok"] for c in results]).cpu().numpy().astype(bool)
    log_w = torch.cat([c.log_w for c in results]).cpu().numpy()
    offsets = np.cumsum([0] + [len(c.z) for c in results])  # lineages are numbered across batches
    ancestor = (
        np.concatenate([c.ancestor.cpu().numpy() + o for c, o in zip(results, offsets)])
        if all(c.ancestor is not None for c in results)
        else None
    )
    e = u * kT
    finite = np.isfinite(e) & np.isfinite(x).all(axis=(1, 2)) & np.isfinite(log_q)
    extras = {"log_q": log_q, "log_w": np.where(finite & ok, log_w, -np.inf), "finite": finite, "in_domain": ok}
    if ancestor is not None:
        extras["ancestor"] = ancestor
    n_evals = int(sum(c.n_evals for c in results)) + int(plan["pilot_evals"])
    acceptance, jumps = (_per_level(results, a, r.levels) for a in ("acceptance", "independence_acceptance"))
    summary = _summary(u, extras, complete.get("weights_defined", False))
    summary.update(
        energy_evals=n_evals,
        evals_per_sample=n_evals / s.n,
        levels=r.levels,
        final_independence_acceptance=float(jumps[-1]) if len(jumps) and np.isfinite(jumps[-1]) else None,
    )
    if ancestor is not None and summary.get("reverse_ess") is not None:  # copies of one lineage count once
        from bgp4.analysis.weights import lineage_ess

        summary.update(lineage_ess=lineage_ess(extras["log_w"], ancestor), lineages=int(np.unique(ancestor).size))
    record.update(
        summary=json.dumps(summary),
        temperature=temperature,
        betas=betas.tolist(),
        step_sizes=sizes.tolist(),
        acceptance=[float(a) for a in acceptance],
        independence_acceptance=[float(a) for a in jumps],
        energy_evals=n_evals,
        evals_per_sample=n_evals / s.n,
        pilot_evals=int(plan["pilot_evals"]),
        resampled_levels=int(sum(c.resampled.sum() for c in results)),
        wall_s=time.perf_counter() - started,
        latent_dims=int(z.shape[1]),
        molecule=molecule.name,
    )
    chunks = (
        {"coordinates": x[i : i + s.batch].astype(np.float32), "potentialEnergy": e[i : i + s.batch].astype(np.float32)}
        for i in range(0, s.n, s.batch)
    )
    write_trajectory(out, molecule.topology, chunks, record, extras=extras)
    shutil.rmtree(state_dir)
    return summary, True


def _per_level(results: list, name: str, levels: int) -> np.ndarray:
    """The mean over batches of a per-level acceptance array (K,), nan where no batch has one."""
    if not levels:
        return np.zeros(0)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # levels without moves of that kind
        return np.nanmean(np.stack([getattr(c, name) for c in results]), axis=0)
