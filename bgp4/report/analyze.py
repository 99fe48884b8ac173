"""The analysis stage: MD data and sampled runs in, figures, `metrics.json` and `report.md` out.

Energies are read in kJ/mol and reported in kT at the data's temperature.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bgp4.analysis import estimators as A
from bgp4.analysis import plots
from bgp4.analysis.metrics import REWEIGHTED_KEYS, model_metrics, summarize_reference
from bgp4.analysis.weights import lineage_ess
from bgp4.errors import InputError
from bgp4.generator.rundir import RunDirectory
from bgp4.generator.sample import REFINED_EXTRAS, SAMPLE_EXTRAS, default_samples_path, refined_path
from bgp4.simulation.data import load_trajectory, resolve_temperature
from bgp4.simulation.energy import OpenMMEnergy

__all__ = [
    "NOISE_FRAMES",
    "PREDATES_CHECK",
    "weights_status",
    "analyze",
    "format_number",
    "NOT_DEFINED",
    "OPTIONAL_KEYS",
    "METRICS_SECTION",
    "render_report",
]

NOISE_FRAMES = 20_000  # MD frames perturbed for the noise reference column
#: Why weights count as undefined for a run whose complete.json has no `weights_defined` key.
PREDATES_CHECK = "run predates the constraint check; weights are defined only when every constrained bond is held fixed"


def weights_status(complete: dict[str, Any]) -> tuple[bool, str | None]:
    """(weights defined?, why not) from a run's complete.json: its `weights_defined` and
    `weights_note` keys; a run without the key predates the check and has no defined weights."""
    if "weights_defined" not in complete:
        return False, PREDATES_CHECK
    if complete["weights_defined"] is True:
        return True, None
    return False, str(complete.get("weights_note") or "the run marks its importance weights as not defined")


def _run_label(path: Path, taken: set[str]) -> str:
    label = path.name or str(path)
    return label if label not in taken else str(path)


def _load_samples(run: Path, n_atoms: int) -> list[tuple[str, dict[str, Any], Any]]:
    """The run's samples and, when refined, its refined samples: [(label suffix, info, samples)]."""
    rundir = RunDirectory(run)
    settings = rundir.settings()
    path = default_samples_path(run)
    if not path.exists():
        raise InputError(f"run {run} has no samples ({path}); run `bgp4 sample {run}` first")
    info = {"settings": settings, "complete": rundir.completion()}
    entries = [("", info, load_trajectory(path, n_atoms=n_atoms, extras=SAMPLE_EXTRAS))]
    if refined_path(path).exists():
        refined = load_trajectory(refined_path(path), n_atoms=n_atoms, extras=REFINED_EXTRAS)
        entries.append((f" +AIS({refined.settings.get('refine_levels')})", info, refined))
    return entries


def analyze(
    data_path: str | Path,
    runs: list[str | Path],
    out: str | Path = "report",
    seed: int = 0,
    workers: int = 0,
    temperature: float | None = None,
) -> dict[str, Any]:
    """Compare the sampled runs with the MD data; writes figures, metrics.json and report.md to `out`.

    `temperature` (K) is needed only for a data file that records none (a plain mdtraj file).
    """
    if not runs:
        raise InputError("name at least one run directory to analyze")
    data = load_trajectory(data_path)
    molecule = data.molecule()
    temperature = resolve_temperature(data.settings.get("temperature"), temperature, data_path)
    loaded = [
        (Path(r), suffix, info, samples)
        for r in runs
        for suffix, info, samples in _load_samples(Path(r), molecule.n_atoms)
    ]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    metrics, ref = _md_reference(data, molecule, temperature, loaded[0][0] / "split.npz", seed, workers)
    violins = {"MD": ref.u, "MD + noise": ref.u_noisy}
    rama = {"MD": (ref.phi, ref.psi, None)}
    free = {"MD": A.free_energy_1d(ref.phi)}
    taken: set[str] = set()
    label = ""
    for run, suffix, info, samples in loaded:
        label = _run_label(run, taken) if not suffix else label + suffix  # a refined entry follows its run's
        taken.add(label)
        summary, u, phi, psi, log_w = _model_entry(run, suffix, info, samples, ref, seed)
        metrics["models"][label] = summary
        violins[label] = u
        rama[label] = (phi, psi, None)
        free[label] = A.free_energy_1d(phi)
        if summary["weights_defined"]:  # an undefined weight would draw noise as a curve
            free[f"{label} reweighted"] = A.free_energy_1d(phi, weights=A.normalized_weights(log_w))
    metrics["figures"] = _figures(out, metrics, violins, rama, free, ref.threshold)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    (out / "report.md").write_text(render_report(metrics, data_path))
    return metrics


@dataclass
class _Reference:
    """The MD data as the models are measured against it: energies u (kT), backbone dihedrals
    (rad), the low-energy threshold (kT); and u of the noisy reference frames."""

    molecule: Any
    kT: float  # kJ/mol
    u: np.ndarray
    u_noisy: np.ndarray
    phi: np.ndarray
    psi: np.ndarray
    threshold: float


def _md_reference(
    data, molecule, temperature: float, split: Path, seed: int, workers: int
) -> tuple[dict[str, Any], _Reference]:
    """The metrics of the MD data and of NOISE_FRAMES of its frames with noise (the start of
    metrics.json), and the reference the models are compared with."""
    kT = molecule.kT(temperature)
    u_md = data.energies / kT
    train_idx = np.load(split)["train"] if split.exists() else np.arange(data.n_frames)
    threshold = A.low_energy_threshold(u_md[train_idx])
    phi_md, psi_md = A.backbone_dihedrals(data.xyz, molecule)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.permutation(data.n_frames)[:NOISE_FRAMES])
    with OpenMMEnergy(molecule.system, temperature, n_workers=workers or None) as energy:
        u_noisy = energy.energies_kjmol(A.noisy_reference(data.xyz[pick], rng=rng)) / kT
    metrics: dict[str, Any] = {
        "temperature_K": temperature,
        "kT_kJ_per_mol": kT,
        "low_energy_threshold_kT": threshold,
        "md": summarize_reference(u_md, threshold, phi=phi_md),
        "md_noise_0.004nm": summarize_reference(u_noisy, threshold, u_md_kT=u_md),
        "models": {},
    }
    return metrics, _Reference(molecule, kT, u_md, u_noisy, phi_md, psi_md, threshold)


def _model_entry(run: Path, suffix: str, info: dict[str, Any], samples, ref: _Reference, seed: int):
    """One samples file's metrics, with its u (kT), phi, psi (rad) and log weights for the figures."""
    u = samples.energies / ref.kT
    in_domain = samples.extras["in_domain"].astype(bool)
    log_q = np.where(in_domain, samples.extras["log_q"], np.nan)  # a wrong log q must not weigh
    if suffix:  # refined samples carry AIS weights: the log q that makes -u - log q equal them
        with np.errstate(invalid="ignore"):
            log_q = np.where(in_domain, -samples.energies / ref.kT - samples.extras["log_w"], np.nan)
    phi, psi = A.backbone_dihedrals(samples.xyz, ref.molecule)
    defined, note = weights_status(info["complete"])
    summary = model_metrics(
        u,
        log_q,
        phi,
        psi,
        ref.u,
        ref.phi,
        ref.psi,
        ref.threshold,
        weights_defined=defined,
        weights_note=note,
        seed=seed,
    )
    summary.update(
        model=info["settings"].get("model"),
        run=str(run),
        out_of_domain=int(np.count_nonzero(~in_domain)),
        test_nll=info["complete"].get("test_nll_end"),
        train_wall_s=info["complete"].get("wall_s"),
        energy_evals_per_sample=samples.settings.get("evals_per_sample", 1),
    )
    log_w = A.log_weights(u, log_q)
    if summary["weights_defined"] and samples.settings.get("resampled_levels") and "ancestor" in samples.extras:
        summary["reverse_ess_lineage"] = lineage_ess(log_w, samples.extras["ancestor"])
    return summary, u, phi, psi, log_w


def _figures(out: Path, metrics: dict[str, Any], violins, rama, free, threshold: float) -> dict[str, list[str]]:
    """Draw the energy violins, Ramachandran panels and free energies along phi; their file names."""
    low = {"MD": metrics["md"]["low_energy_fraction"], "MD + noise": metrics["md_noise_0.004nm"]["low_energy_fraction"]}
    low.update({k: v["low_energy_fraction"] for k, v in metrics["models"].items()})
    figures = {
        "energies": plots.energy_violins(violins, low, out / "energies", threshold=threshold),
        "ramachandran": plots.ramachandran_panels(rama, out / "ramachandran"),
        "free_energy_phi": plots.free_energy_phi(free, out / "free_energy_phi"),
    }
    return {k: [p.name for p in v] for k, v in figures.items()}


def format_number(value: Any, digits: int = 4) -> str:
    """A number as a person reads it: floats to `digits` significant digits, None as n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _fmt(value: Any, digits: int = 3) -> str:
    return format_number(value, digits)


def _signed(value: Any) -> str:
    return "n/a" if value is None else f"{value:+.2g}"


NOT_DEFINED = "not defined"
#: Rows shown only when some model has them (SMC-resampled samples only).
OPTIONAL_KEYS = {"reverse_ess_lineage"}
#: A table cell: one model's metrics -> text.
Cell = Callable[[dict[str, Any]], str]


def _plain(key: str) -> Cell:
    return lambda m: _fmt(m.get(key))


def _places(key: str, places: int) -> Cell:
    """Fixed decimals: a test NLL near -147 nats differs between models in the second decimal."""
    return lambda m: "n/a" if m.get(key) is None else f"{m[key]:.{places}f}"


def _with_floor(key: str, floor: str) -> Cell:
    return lambda m: f"{_fmt(m.get(key))} (floor {_fmt(m.get(floor))})"


def _with_error(key: str, error: str) -> Cell:
    return lambda m: f"{_fmt(m.get(key))} (error {_signed(m.get(error))})"


def _ess(m: dict[str, Any]) -> str:
    return (
        f"{_fmt(m.get('reverse_ess'))} [{_fmt(m.get('reverse_ess_ci_low'))}, "
        f"{_fmt(m.get('reverse_ess_ci_high'))}], N = {m.get('n_samples')}"
    )


def _rows(md: dict[str, Any]) -> list[tuple[str, Cell, tuple[str, ...]]]:
    """Table rows: (label, cell, the keys the cell shows); labels carry the MD values."""
    p_md, df_md = _fmt(md.get("p_phi_positive")), _fmt(md.get("dF_phi_kT"))
    return [
        ("samples N", _plain("n_samples"), ("n_samples",)),
        ("non-finite energies", _plain("n_nonfinite"), ("n_nonfinite",)),
        ("outside IC domain", _plain("out_of_domain"), ("out_of_domain",)),
        ("mean energy (kT)", _plain("mean_energy_kT"), ("mean_energy_kT",)),
        ("median energy (kT)", _plain("median_energy_kT"), ("median_energy_kT",)),
        ("energy shift vs MD (kT)", _plain("energy_shift_kT"), ("energy_shift_kT",)),
        ("energy shift, reweighted (kT)", _plain("energy_shift_reweighted_kT"), ("energy_shift_reweighted_kT",)),
        ("energy W2 vs MD (kT)", _plain("energy_w2"), ("energy_w2",)),
        ("energy W2, reweighted (kT)", _plain("energy_w2_reweighted"), ("energy_w2_reweighted",)),
        ("low-energy fraction", _plain("low_energy_fraction"), ("low_energy_fraction",)),
        ("reverse ESS [95 % CI], N", _ess, ("reverse_ess",)),
        ("reverse ESS by SMC lineage", _plain("reverse_ess_lineage"), ("reverse_ess_lineage",)),
        ("Ramachandran KL (MD floor)", _with_floor("ramachandran_kl", "ramachandran_kl_floor"), ("ramachandran_kl",)),
        (
            "Ramachandran KL, reweighted (MD floor at ESS·N)",
            _with_floor("ramachandran_kl_reweighted", "ramachandran_kl_floor_ess"),
            ("ramachandran_kl_reweighted",),
        ),
        ("Ramachandran TV (MD floor)", _with_floor("ramachandran_tv", "ramachandran_tv_floor"), ("ramachandran_tv",)),
        (
            "Ramachandran TV, reweighted (MD floor at ESS·N)",
            _with_floor("ramachandran_tv_reweighted", "ramachandran_tv_floor_ess"),
            ("ramachandran_tv_reweighted",),
        ),
        (f"P(phi > 0) (MD {p_md})", _with_error("p_phi_positive", "p_phi_positive_error"), ("p_phi_positive",)),
        (
            "P(phi > 0), reweighted",
            _with_error("p_phi_positive_reweighted", "p_phi_positive_reweighted_error"),
            ("p_phi_positive_reweighted",),
        ),
        (f"dF(phi) (kT) (MD {df_md})", _with_error("dF_phi_kT", "dF_phi_error_kT"), ("dF_phi_kT",)),
        (
            "dF(phi), reweighted (kT)",
            _with_error("dF_phi_reweighted_kT", "dF_phi_reweighted_error_kT"),
            ("dF_phi_reweighted_kT",),
        ),
        ("test NLL (nats)", _places("test_nll", 3), ("test_nll",)),
        ("energy evaluations per sample", _plain("energy_evals_per_sample"), ("energy_evals_per_sample",)),
    ]


METRICS_SECTION = (
    "## Metrics\n"
    "\n"
    "All energies are reduced, u = U / kT at the data's temperature; w = exp(-u - log q) are the "
    "importance weights of the samples.\n"
    "\n"
    "- **energy shift**: mean u of the samples minus mean u of MD; samples with a non-finite energy are "
    'left out (counted in "non-finite energies"); reweighted: the mean under w.\n'
    "- **energy W2**: 1-d Wasserstein-2 distance between the MD and sample energy distributions (kT), "
    "from their quantile functions (weighted quantiles under w when reweighted); non-finite energies "
    "left out; never below |energy shift|.\n"
    "- **low-energy fraction**: share of samples below the highest training-frame energy.\n"
    "- **reverse ESS**: Kish effective sample size per sample, (sum w)^2 / (N sum w^2), over all N "
    "samples (zero weight for a non-finite energy or a sample outside the IC domain); the interval is "
    "the 2.5-97.5 % percentile of 200 seeded bootstrap resamples of the N samples.\n"
    "- **reverse ESS by SMC lineage** (only for samples refined with resampling): resampling copies "
    "samples, and the copies' equal weights make the plain Kish ESS overstate; here the weights of all "
    "samples that descend from one starting sample are summed first and the Kish ESS of those sums is "
    "divided by N (copies counted as fully correlated: a lower estimate).\n"
    "- **Ramachandran KL**: KL(MD || model) of 64 x 64 (phi, psi) histograms on [-pi, pi]^2 (density "
    "floor 1e-10); reweighted under w.\n"
    "- **Ramachandran TV**: total variation 0.5 sum |p_i - q_i| of the same bins' probabilities, in [0, "
    "1].\n"
    "- **MD floor**: the same distance for a seeded MD subsample of the model's size against the other "
    "MD frames, i.e. about what a perfect model would score at that N; undefined when the model has at "
    "least as many samples as MD. For the reweighted figures the subsample has ESS·N frames, a rough "
    "guide only (it overstates the KL floor: N weighted samples leave fewer bins empty than ESS·N "
    "unweighted ones).\n"
    "- **P(phi > 0)**: population of the alpha_L and C7ax states (phi > 0); error = model - MD.\n"
    "- **dF(phi)**: -ln(P(phi > 0) / P(phi < 0)) in kT; error = model - MD.\n"
    "- **reweighted figures** are given only where the importance weights are defined: p and q must live "
    "on the same space, so every constrained bond of the system must be held fixed (not a flow "
    "dimension).\n"
)


def render_report(metrics: dict[str, Any], data_path: str | Path) -> str:
    """Markdown: the metric definitions, the comparison table and the figures."""
    models = metrics["models"]
    md, noisy = metrics["md"], metrics["md_noise_0.004nm"]
    header = "| metric | " + " | ".join(models) + " |\n|---|" + "---|" * len(models) + "\n"

    def cell(m: dict[str, Any], show: Cell, keys: tuple[str, ...]) -> str:
        if not m.get("weights_defined") and any(k in REWEIGHTED_KEYS or k in OPTIONAL_KEYS for k in keys):
            return NOT_DEFINED
        return show(m)

    rows = "".join(
        f"| {name} | " + " | ".join(cell(m, show, keys) for m in models.values()) + " |\n"
        for name, show, keys in _rows(md)
        if not set(keys) <= OPTIONAL_KEYS or any(k in m for m in models.values() for k in keys)
    )
    notes = "".join(
        f"- {label}: importance weights {NOT_DEFINED} ({m.get('weights_note')}), so no reverse ESS and no "
        "reweighted figures.\n"
        for label, m in models.items()
        if not m.get("weights_defined")
    ) + "".join(
        f"- {label}: Ramachandran MD floor undefined ({m['ramachandran_floor_note']}).\n"
        for label, m in models.items()
        if m.get("ramachandran_floor_note")
    )
    return (
        "# bgp4 report\n\n"
        f"MD data: `{data_path}` at {metrics['temperature_K']:g} K (kT = {metrics['kT_kJ_per_mol']:.4f} kJ/mol). "
        f"Low-energy threshold (max energy of the training frames): {metrics['low_energy_threshold_kT']:.2f} kT.\n\n"
        f"MD mean energy {_fmt(md['mean_energy_kT'])} kT; with 0.004 nm Gaussian noise "
        f"{_fmt(noisy['mean_energy_kT'])} kT (shift {_fmt(noisy.get('energy_shift_kT'))} kT, "
        f"low-energy fraction {_fmt(noisy['low_energy_fraction'])}). "
        f"MD P(phi > 0) = {_fmt(md.get('p_phi_positive'))}, dF(phi) = {_fmt(md.get('dF_phi_kT'))} kT.\n\n"
        + METRICS_SECTION
        + "\n## Models\n\n"
        + header
        + rows
        + "\nSamples outside the internal-coordinate domain carry no importance weight (their log q is not valid).\n"
        + (f"\n{notes}" if notes else "")
        + "\n## Figures\n\n"
        "Energies (kT):\n\n![energies](energies.png)\n\n"
        "Ramachandran plots (log density, shared scale):\n\n![ramachandran](ramachandran.png)\n\n"
        "Free energy along phi, raw and (where the weights are defined) reweighted:\n\n"
        "![free energy](free_energy_phi.png)\n"
    )
