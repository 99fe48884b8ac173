"""The analysis stage: MD data and sampled runs in, figures, `metrics.json` and `report.md` out.

Energies are read in kJ/mol and reported in kT at the data's temperature.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from bgp4.errors import InputError

NOISE_FRAMES = 20_000  # MD frames perturbed for the noise reference column


def _run_label(path: Path, taken: set[str]) -> str:
    label = path.name or str(path)
    return label if label not in taken else str(path)


def _load_samples(run: Path) -> tuple[dict[str, Any], Any]:
    from bgp4.data import load_trajectory
    from bgp4.rundir import COMPLETE, RunDirectory
    from bgp4.sample import SAMPLE_EXTRAS, default_samples_path

    rundir = RunDirectory(run)
    settings = rundir.settings()
    path = default_samples_path(run)
    if not path.exists():
        raise InputError(f"run {run} has no samples ({path}); run `bgp4 sample {run}` first")
    samples = load_trajectory(path, n_atoms=22, extras=SAMPLE_EXTRAS)
    complete = json.loads(rundir.file(COMPLETE).read_text()) if rundir.complete else {}
    return {"settings": settings, "complete": complete}, samples


def analyze(data_path: str | Path, runs: list[str | Path], out: str | Path = "report", seed: int = 0,
            workers: int = 0, temperature: float | None = None) -> dict[str, Any]:
    """Compare the sampled runs with the MD data; writes figures, metrics.json and report.md to `out`.

    `temperature` (K) is needed only for a data file that records none (a plain mdtraj file).
    """
    from bgp4 import analysis as A
    from bgp4 import plots
    from bgp4.data import load_trajectory, resolve_temperature
    from bgp4.energy import OpenMMEnergy
    from bgp4.molecule import alanine_dipeptide

    if not runs:
        raise InputError("name at least one run directory to analyze")
    molecule = alanine_dipeptide()
    data = load_trajectory(data_path, n_atoms=molecule.n_atoms)
    temperature = resolve_temperature(data.settings.get("temperature"), temperature, data_path)
    loaded = [(Path(r), *_load_samples(Path(r))) for r in runs]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    kT = molecule.kT(temperature)
    u_md = data.energies / kT
    split = Path(loaded[0][0]) / "split.npz"
    train_idx = np.load(split)["train"] if split.exists() else np.arange(data.n_frames)
    threshold = A.low_energy_threshold(u_md[train_idx])
    phi_md, psi_md = A.backbone_dihedrals(data.xyz, molecule)

    rng = np.random.default_rng(seed)
    pick = np.sort(rng.permutation(data.n_frames)[:NOISE_FRAMES])
    with OpenMMEnergy(molecule.system, temperature, n_workers=workers or None) as energy:
        u_noisy = energy.energies_kjmol(A.noisy_reference(data.xyz[pick], rng=rng)) / kT

    metrics: dict[str, Any] = {
        "temperature_K": temperature, "kT_kJ_per_mol": kT, "low_energy_threshold_kT": threshold,
        "md": A.summarize_reference(u_md, threshold),
        "md_noise_0.004nm": A.summarize_reference(u_noisy, threshold, u_md_kT=u_md),
        "models": {},
    }
    violins = {"MD": u_md, "MD + noise": u_noisy}
    rama = {"MD": (phi_md, psi_md, None)}
    free = {"MD": A.free_energy_1d(phi_md)}
    taken: set[str] = set()
    for run, info, samples in loaded:
        label = _run_label(run, taken)
        taken.add(label)
        u = samples.energies / kT
        in_domain = samples.extras["in_domain"].astype(bool)
        log_q = np.where(in_domain, samples.extras["log_q"], np.nan)  # a wrong log q must not weigh
        phi, psi = A.backbone_dihedrals(samples.xyz, molecule)
        summary = A.summarize_model(u, log_q, phi, psi, u_md, phi_md, psi_md, threshold)
        weights = A.normalized_weights(A.log_weights(u, log_q))
        summary.update(
            model=info["settings"].get("model"), run=str(run), out_of_domain=int(np.count_nonzero(~in_domain)),
            test_nll=info["complete"].get("test_nll_end"), train_wall_s=info["complete"].get("wall_s"),
        )
        metrics["models"][label] = summary
        violins[label] = u
        rama[label] = (phi, psi, None)
        free[label] = A.free_energy_1d(phi)
        free[f"{label} reweighted"] = A.free_energy_1d(phi, weights=weights)

    low = {"MD": metrics["md"]["low_energy_fraction"], "MD + noise": metrics["md_noise_0.004nm"]["low_energy_fraction"]}
    low.update({k: v["low_energy_fraction"] for k, v in metrics["models"].items()})
    figures = {
        "energies": plots.energy_violins(violins, low, out / "energies", threshold=threshold),
        "ramachandran": plots.ramachandran_panels(rama, out / "ramachandran"),
        "free_energy_phi": plots.free_energy_phi(free, out / "free_energy_phi"),
    }
    metrics["figures"] = {k: [p.name for p in v] for k, v in figures.items()}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    (out / "report.md").write_text(render_report(metrics, data_path))
    return metrics


def format_number(value: Any, digits: int = 4) -> str:
    """A number as a person reads it: floats to `digits` significant digits, None as n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _fmt(value: Any, digits: int = 3) -> str:
    return format_number(value, digits)


ROWS = [
    ("samples", "n_samples"), ("non-finite energies", "n_nonfinite"), ("outside IC domain", "out_of_domain"),
    ("mean energy (kT)", "mean_energy_kT"), ("median energy (kT)", "median_energy_kT"),
    ("energy shift vs MD (kT)", "energy_shift_kT"), ("low-energy fraction", "low_energy_fraction"),
    ("reverse ESS", "reverse_ess"), ("Ramachandran KL", "ramachandran_kl"),
    ("Ramachandran KL, reweighted", "ramachandran_kl_reweighted"), ("test NLL (nats)", "test_nll"),
]


def render_report(metrics: dict[str, Any], data_path: str | Path) -> str:
    """Markdown: the comparison table and the figures."""
    models = metrics["models"]
    md, noisy = metrics["md"], metrics["md_noise_0.004nm"]
    header = "| metric | " + " | ".join(models) + " |\n|---|" + "---|" * len(models) + "\n"
    rows = "".join(
        f"| {name} | " + " | ".join(_fmt(m.get(key)) for m in models.values()) + " |\n"
        for name, key in ROWS
    )
    return (
        "# bgp4 report\n\n"
        f"MD data: `{data_path}` at {metrics['temperature_K']:g} K (kT = {metrics['kT_kJ_per_mol']:.4f} kJ/mol). "
        f"Low-energy threshold (max energy of the training frames): {metrics['low_energy_threshold_kT']:.2f} kT.\n\n"
        f"MD mean energy {_fmt(md['mean_energy_kT'])} kT; with 0.004 nm Gaussian noise "
        f"{_fmt(noisy['mean_energy_kT'])} kT (shift {_fmt(noisy.get('energy_shift_kT'))} kT, "
        f"low-energy fraction {_fmt(noisy['low_energy_fraction'])}).\n\n"
        "## Models\n\n" + header + rows +
        "\nSamples outside the internal-coordinate domain carry no importance weight (their log q is not valid).\n\n"
        "## Figures\n\n"
        "Energies (kT):\n\n![energies](energies.png)\n\n"
        "Ramachandran plots (log density, shared scale):\n\n![ramachandran](ramachandran.png)\n\n"
        "Free energy along phi, raw and reweighted:\n\n![free energy](free_energy_phi.png)\n"
    )
