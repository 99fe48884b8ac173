"""Drawing configurations from a trained generator, with energies and importance weights.

The samples file is an mdtraj HDF5 file: coordinates in nm and `potentialEnergy` in kJ/mol
(+inf where OpenMM could not evaluate a sample), plus per-sample arrays
`log_q` (log density of the flow, nats), `log_w` (log importance weight -u - log q, u in kT at
the data's temperature; -inf where the energy is not finite or the sample left the
internal-coordinate domain, whose log q is not trustworthy), `finite` and `in_domain` flags.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bgp4.analysis.weights import lineage_ess, reverse_ess
from bgp4.errors import InputError
from bgp4.flows.coordinates import LOG_Q
from bgp4.generator.model import load_generator
from bgp4.generator.refine import AnnealPlan, ChainStore, GeneratorTarget, anneal_batches, plan_annealing, schedule
from bgp4.generator.rows import by_rows
from bgp4.generator.rundir import COMPLETE, MODEL, RunDirectory
from bgp4.platform import resolve_device
from bgp4.settings import RefineSettings, SampleSettings
from bgp4.simulation.data import read_settings, resolve_temperature, write_trajectory
from bgp4.simulation.energy import OpenMMEnergy
from bgp4.stage import changed, refuse_changes

__all__ = [
    "REFINED_EXTRAS",
    "SAMPLE_EXTRAS",
    "RefineSettings",
    "SampleSettings",
    "default_samples_path",
    "latent_batches",
    "refine_run",
    "refined_path",
    "sample_run",
]

SAMPLE_EXTRAS = ("log_q", "log_w", "finite", "in_domain")
#: Refined files also hold each sample's SMC lineage (the starting sample it descends from).
REFINED_EXTRAS = SAMPLE_EXTRAS + ("ancestor",)


def default_samples_path(run: str | Path) -> Path:
    """Where `bgp4 sample RUN` writes the run's samples: `RUN/samples.h5`."""
    return Path(run) / "samples.h5"


def refined_path(samples_path: str | Path) -> Path:
    """`RUN/samples.h5` -> `RUN/samples-refined.h5`."""
    p = Path(samples_path)
    return p.with_name(p.stem + "-refined" + p.suffix)


def latent_batches(bg, s: SampleSettings) -> Iterator[torch.Tensor]:
    """The prior draws z (b, n_dims) of each batch, from one generator seeded with s.seed.

    Raw sampling and refinement share them, so refined samples start from the raw ones.
    """
    gen = torch.Generator(device=bg.device).manual_seed(s.seed)
    for start in range(0, s.n, s.batch):
        yield bg.sample_latent(min(s.batch, s.n - start), generator=gen).to(bg.device)


# --------------------------------------------------------------------------- what both stages share


def _request(
    kind: str, run_path: str | Path, s: SampleSettings, refine: RefineSettings | None = None
) -> tuple[RunDirectory, dict[str, Any]]:
    """The finished training run and the settings record of a request to sample it (or refine its
    samples); InputError when the run is not finished."""
    run = RunDirectory(run_path)
    train_settings = run.settings()
    if not run.complete:
        raise InputError(f"{run.path} holds no finished training run; run `bgp4 train` first")
    record = {"kind": kind, "run": str(run.path.resolve()), "model": train_settings["model"], **asdict(s)}
    record["device"] = _drawn_on(s.device)
    record["log_q"] = LOG_Q
    record.update({f"refine_{k}": v for k, v in (asdict(refine) if refine else {}).items()})
    record.pop("workers")  # how the energies are computed, not what they are
    return run, record


def _drawn_on(device: str) -> str:
    """The device that samples asked for on `device` are drawn on here: "auto" resolved, so that a
    file drawn with `--device auto` on a CPU machine is the one an explicit `--device cpu` asks for."""
    return str(resolve_device(device)) if device == "auto" else device


def _outdated(stored: dict[str, Any], differ: Sequence[str]) -> bool:
    """Whether an output with the settings record `stored`, differing from a request in `differ`,
    was written by bgp4 before its log q had today's terms (it records no `log_q`: its weights lack
    the rigid block's orbit volume) and nothing else differs. A file of a later version, whose
    `log_q` names another convention, is not outdated: an older bgp4 must not replace it."""
    return set(differ) == {"log_q"} and "log_q" not in stored


def _kept(out: Path, record: dict[str, Any], overwrite: bool, renew: bool) -> dict[str, Any] | None:
    """The summary of `out` when it is a finished output of `record` (the stage is complete);
    None when there is none, it is to be overwritten, or `renew` and it is outdated. InputError
    when it has other settings."""
    if overwrite or not out.exists():
        return None
    stored = read_settings(out)  # the file is written in one atomic step: it is its own marker
    if "device" in stored:  # files of earlier versions recorded "auto" as asked
        stored = {**stored, "device": _drawn_on(stored["device"])}
    differ = changed(stored, record, keys=record)
    if renew and _outdated(stored, differ):
        return None
    refuse_changes(f"{out} exists", differ, "pass overwrite=True (--overwrite) to replace it")
    return json.loads(stored.get("summary", "{}"))


@dataclass
class _Source:
    """A finished run's generator (frozen, on its device) with what its weights need."""

    bg: Any
    molecule: Any
    temperature: float  # K
    kT: float  # kJ/mol
    complete: dict[str, Any]  # the run's completion record


def _load(run: RunDirectory, device: str, temperature: float | None = None) -> _Source:
    """Load the run's generator; the temperature (K) is the one the run recorded, `temperature`
    only for a run that recorded none (InputError when they disagree)."""
    where = resolve_device(device)
    bg = load_generator(run.file(MODEL), map_location=where).to(where).eval()
    for p in bg.parameters():
        p.requires_grad_(False)  # gradients are wanted in z only (refinement), or not at all
    complete = run.completion()
    molecule = bg.molecule()
    temperature = resolve_temperature(complete.get("temperature"), temperature, run.file(COMPLETE))
    return _Source(bg, molecule, temperature, molecule.kT(temperature), complete)


def _summary(u: np.ndarray, extras: dict[str, np.ndarray], weights_defined: bool) -> dict[str, Any]:
    """Counts and energies (kT) of a samples file; reverse ESS only where weights are defined, else None."""
    finite = extras["finite"]
    return {
        "samples": int(u.size),
        "nonfinite_energy": int(np.count_nonzero(~finite)),
        "out_of_domain": int(np.count_nonzero(~extras["in_domain"])),
        "mean_energy_kT": float(np.mean(u[finite])) if finite.any() else None,
        "median_energy_kT": float(np.median(u[finite])) if finite.any() else None,
        "reverse_ess": float(reverse_ess(extras["log_w"])) if weights_defined is True else None,
    }


def _write(out: Path, src: _Source, chunks: Iterator[dict[str, np.ndarray]], record: dict[str, Any], extras) -> None:
    """The samples file: frames (nm, kJ/mol), the per-sample `extras`, the settings record last
    (with the molecule and its system, so that the file rebuilds them as a data file does)."""
    record.update(temperature=src.temperature, **src.molecule.record())
    out.parent.mkdir(parents=True, exist_ok=True)
    write_trajectory(out, src.molecule.topology, chunks, record, extras=extras)


# --------------------------------------------------------------------------- raw samples


def sample_run(
    run_path: str | Path,
    settings: SampleSettings = SampleSettings(),
    out: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
    temperature: float | None = None,
    renew: bool = False,
) -> tuple[dict[str, Any], bool]:
    """Sample a finished training run into `out` (default `<run>/samples.h5`).

    Returns (summary, newly_sampled). An existing samples file made with the same settings is
    kept (the stage is complete); one made with other settings needs `overwrite`. The weights
    use the temperature (K) the run recorded; `temperature` is needed only for a run that
    recorded none, and must agree with it otherwise. `renew`: draw again over a file that an
    earlier version wrote with other weights (it records no `log_q`, and nothing else differs; see
    `_outdated`), as the stages that own their run directories (pipeline, sweep) do when they
    resume; `bgp4 sample` refuses it.
    """
    s = settings.validated()
    run, record = _request("samples", run_path, s)
    out = Path(out) if out is not None else default_samples_path(run.path)
    kept = _kept(out, record, overwrite, renew)
    if kept is not None:
        return kept, False
    src = _load(run, s.device, temperature)
    chunks, u, extras = _draw(src, s, progress)
    summary = _summary(u, extras, src.complete.get("weights_defined", False))
    record["summary"] = json.dumps(summary)
    _write(out, src, iter(chunks), record, extras)
    return summary, True


def _draw(
    src: _Source, s: SampleSettings, progress: bool
) -> tuple[list[dict[str, np.ndarray]], np.ndarray, dict[str, np.ndarray]]:
    """Draw s.n samples batch by batch: (frame chunks for the file, u (n,) in kT, per-sample extras)."""
    from tqdm.auto import tqdm

    bg, molecule = src.bg, src.molecule
    latents = latent_batches(bg, s)
    chunks: list[dict[str, np.ndarray]] = []
    extras: dict[str, list[np.ndarray]] = {k: [] for k in SAMPLE_EXTRAS}
    energies: list[np.ndarray] = []  # kJ/mol, float64 (the file keeps float32)
    with (
        OpenMMEnergy(molecule.system, src.temperature, n_workers=s.workers or None) as energy,
        tqdm(total=s.n, desc="sample", unit="sample", disable=not progress) as bar,
    ):
        done = 0
        while done < s.n:
            b = min(s.batch, s.n - done)
            with torch.no_grad():
                x, log_q, ok, _ = by_rows(bg.generate, next(latents))
            x = x.detach().cpu().double().numpy().reshape(b, molecule.n_atoms, 3)
            log_q = log_q.detach().cpu().double().numpy()
            ok = ok.detach().cpu().numpy().astype(bool)
            e = energy.energies_kjmol(x)
            finite = np.isfinite(e) & np.isfinite(x).all(axis=(1, 2)) & np.isfinite(log_q)
            log_w = np.where(finite & ok, -e / src.kT - log_q, -np.inf)
            chunks.append({"coordinates": x.astype(np.float32), "potentialEnergy": e.astype(np.float32)})
            energies.append(e)
            for name, values in zip(SAMPLE_EXTRAS, (log_q, log_w, finite, ok)):
                extras[name].append(values)
            done += b
            bar.update(b)
    return chunks, np.concatenate(energies) / src.kT, {k: np.concatenate(v) for k, v in extras.items()}


# --------------------------------------------------------------------------- refinement (AIS)


def refine_run(
    run_path: str | Path,
    settings: SampleSettings,
    refine: RefineSettings,
    out: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
    renew: bool = False,
    temperature: float | None = None,
) -> tuple[dict[str, Any], bool]:
    """Refine the raw samples of `sample_run` (same n, batch, seed: the same prior draws) by AIS
    (`bgp4.generator.refine.anneal_batches`).

    Writes `<samples>-refined.h5` (same format; log_w the AIS weights; settings hold betas, step
    sizes, acceptance per level of the MALA/HMC and of the independence moves, and energy
    evaluations). Each batch's chains are saved after every level under
    `<samples>-refined.state/`, so a killed run resumes losing at most one level. `renew` as in
    `sample_run`, for the refined file and a partial refinement alike; `temperature` (K) too.
    Returns (summary, newly_refined).
    """
    from tqdm.auto import tqdm

    s, r = settings.validated(), refine.validated()
    run, record = _request("refined-samples", run_path, s, r)
    out = refined_path(out if out is not None else default_samples_path(run.path))
    kept = _kept(out, record, overwrite, renew)
    if kept is not None:
        return kept, False
    store = _resumable(ChainStore(out.with_name(out.stem + ".state")), record, overwrite, renew)
    started = time.perf_counter()
    src = _load(run, s.device, temperature)
    with OpenMMEnergy(src.molecule.system, src.temperature, n_workers=s.workers or None) as energy:
        target = GeneratorTarget(src.bg, energy)
        plan = _plan(store, record, target, s, r)
        batches = list(latent_batches(src.bg, s))
        per_batch = max(r.levels, 1)
        with tqdm(
            total=len(batches) * per_batch, desc=f"refine K={r.levels}", unit="level", disable=not progress
        ) as bar:

            def advance(i: int, c) -> None:
                bar.n = i * per_batch + (c.level if r.levels else int(c.finished))
                bar.refresh()

            results = anneal_batches(
                target, plan, batches, s.seed, r.steps, r.leapfrog, r.resample_ess, r.independence, store, advance
            )
    summary = _write_refined(out, src, results, plan, record, s, r, started)
    store.clear()
    return summary, True


def _resumable(store: ChainStore, record: dict[str, Any], overwrite: bool, renew: bool) -> ChainStore:
    """`store`, cleared when its partial refinement is to be overwritten (or, with `renew`, is
    outdated as `_outdated` says); InputError when it holds one with other settings."""
    differ = store.changes(record) or []
    if differ and (overwrite or (renew and _outdated(store.plan()["record"], differ))):
        store.clear()
        differ = []
    refuse_changes(
        f"{store.path} holds a partial refinement", differ, "pass overwrite=True (--overwrite) to start it again"
    )
    return store


def _plan(store, record: dict[str, Any], target, s: SampleSettings, r: RefineSettings):
    """The partial refinement's plan, or a new one (pilot of min(pilot, n) samples) saved first."""
    saved = store.plan()
    if saved is None:
        new = plan_annealing(target, r.levels, r.steps, r.leapfrog, r.power, min(r.pilot, s.n), s.seed, r.independence)
        store.save_plan(record, new.step_sizes, new.pilot_evals)
        saved = store.plan()
    # the sizes as saved (a JSON round trip keeps every bit): a resumed run uses the same numbers
    sizes = np.asarray(saved["step_sizes"], dtype=np.float64)
    return AnnealPlan(schedule(r.levels, r.power), sizes, int(saved["pilot_evals"]))


def _refined_arrays(src: _Source, results: list) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """x (n, n_atoms, 3) nm, u (n,) kT and the per-sample extras of the finished chains of every batch."""
    with torch.no_grad():
        x = torch.cat([by_rows(src.bg.generate, c.z).x for c in results]).cpu().double().numpy()
    u = torch.cat([c.aux["u"] for c in results]).cpu().numpy()
    log_q = torch.cat([c.aux["log_q"] for c in results]).cpu().numpy()
    ok = torch.cat([c.aux["ok"] for c in results]).cpu().numpy().astype(bool)
    log_w = torch.cat([c.log_w for c in results]).cpu().numpy()
    finite = np.isfinite(u * src.kT) & np.isfinite(x).all(axis=(1, 2)) & np.isfinite(log_q)
    extras = {"log_q": log_q, "log_w": np.where(finite & ok, log_w, -np.inf), "finite": finite, "in_domain": ok}
    if all(c.ancestor is not None for c in results):
        offsets = np.cumsum([0] + [len(c.z) for c in results])  # lineages are numbered across batches
        extras["ancestor"] = np.concatenate([c.ancestor.cpu().numpy() + o for c, o in zip(results, offsets)])
    return x, u, extras


def _write_refined(
    out: Path,
    src: _Source,
    results: list,
    plan,
    record: dict[str, Any],
    s: SampleSettings,
    r: RefineSettings,
    started: float,
) -> dict[str, Any]:
    """Write the refined samples file (its settings: the plan, acceptance, costs); returns its summary."""
    x, u, extras = _refined_arrays(src, results)
    n_evals = int(sum(c.n_evals for c in results)) + int(plan.pilot_evals)
    acceptance, jumps = (_per_level(results, a, r.levels) for a in ("acceptance", "independence_acceptance"))
    summary = _summary(u, extras, src.complete.get("weights_defined", False))
    summary.update(
        energy_evals=n_evals,
        evals_per_sample=n_evals / s.n,
        levels=r.levels,
        final_independence_acceptance=float(jumps[-1]) if len(jumps) and np.isfinite(jumps[-1]) else None,
    )
    if "ancestor" in extras and summary.get("reverse_ess") is not None:  # copies of one lineage count once
        ancestor = extras["ancestor"]
        summary.update(lineage_ess=lineage_ess(extras["log_w"], ancestor), lineages=int(np.unique(ancestor).size))
    record.update(
        summary=json.dumps(summary),
        betas=plan.betas.tolist(),
        step_sizes=plan.step_sizes.tolist(),
        acceptance=[float(a) for a in acceptance],
        independence_acceptance=[float(a) for a in jumps],
        energy_evals=n_evals,
        evals_per_sample=n_evals / s.n,
        pilot_evals=int(plan.pilot_evals),
        resampled_levels=int(sum(c.resampled.sum() for c in results)),
        wall_s=time.perf_counter() - started,
        latent_dims=int(results[0].z.shape[1]),
    )
    e = u * src.kT
    chunks = (
        {"coordinates": x[i : i + s.batch].astype(np.float32), "potentialEnergy": e[i : i + s.batch].astype(np.float32)}
        for i in range(0, s.n, s.batch)
    )
    _write(out, src, chunks, record, extras)
    return summary


def _per_level(results: list, name: str, levels: int) -> np.ndarray:
    """The mean over batches of a per-level acceptance array (K,), nan where no batch has one."""
    if not levels:
        return np.zeros(0)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # levels without moves of that kind
        return np.nanmean(np.stack([getattr(c, name) for c in results]), axis=0)
