"""The analysis stage: MD data and sampled runs in, figures, `metrics.json` and `report.md` out.

Energies are read in kJ/mol and reported in kT at the data's temperature.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from bgp4._io import atomic_write
from bgp4.analysis import estimators as A
from bgp4.analysis import plots, plots_residues
from bgp4.analysis.grid import check_rama_bins
from bgp4.analysis.metrics import TorsionPair, model_metrics, state_summary, summarize_reference
from bgp4.analysis.residues import ResidueTorsions, dihedral_angles, residue_dihedrals, residue_torsions
from bgp4.analysis.weights import lineage_ess
from bgp4.errors import InputError
from bgp4.generator.model import model_molecule
from bgp4.generator.rundir import MODEL, SPLIT, RunDirectory
from bgp4.generator.sample import REFINED_EXTRAS, SAMPLE_EXTRAS, default_samples_path, refined_path
from bgp4.report.costs import cost_metrics, forward_metrics
from bgp4.report.render import (  # noqa: F401 - re-exported: the CLI and the pipeline format numbers as the report does
    NOT_DEFINED,
    OPTIONAL_KEYS,
    format_number,
    metrics_section,
    render_report,
)
from bgp4.settings import SampleSettings
from bgp4.simulation.data import load_trajectory, resolve_temperature
from bgp4.simulation.energy import OpenMMEnergy, md_energies_kjmol
from bgp4.simulation.molecule import Molecule, central_pair, check_same_molecule
from bgp4.stage import DATA, same_data, with_fingerprint

__all__ = [
    "NOISE_FRAMES",
    "OLD_LOG_Q",
    "PREDATES_CHECK",
    "weights_status",
    "analyze",
    "format_number",
    "NOT_DEFINED",
    "OPTIONAL_KEYS",
    "metrics_section",
    "render_report",
]

NOISE_FRAMES = 20_000  # MD frames perturbed for the noise reference column
#: Why weights count as undefined for a run whose complete.json has no `weights_defined` key.
PREDATES_CHECK = "run predates the constraint check; weights are defined only when every constrained bond is held fixed"
#: The note of a samples file that records no `log_q` convention (`bgp4.flows.coordinates.LOG_Q`).
OLD_LOG_Q = (
    "samples drawn before log q included the rigid block's orbit volume (bgp4 before c6e1922): their "
    "weights lack a term of std 0.03-0.05 nats (reverse ESS about 0.1-0.3 % low, reweighted dF(phi > 0) of "
    "alanine dipeptide at 600 K 0.026 kT high); `bgp4 sample --overwrite` draws them again (in a sweep: "
    "delete the run's sweep-done.json and run the sweep again)"
)


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


def _load_samples(run: Path, data_molecule: Molecule, data: dict[str, Any]) -> list[tuple[str, dict[str, Any], Any]]:
    """The run's samples and, when refined, its refined samples: [(label suffix, info, samples)];
    InputError when the run's model is of another molecule or system than `data_molecule`. `data`:
    the analyzed data file's record ({data, data_fingerprint}), to tell whether the run trained on it."""
    n_atoms = data_molecule.n_atoms
    rundir = RunDirectory(run)
    settings = rundir.settings()
    if rundir.file(MODEL).is_file():  # weights against another target would mean nothing
        check_same_molecule(data_molecule, model_molecule(rundir.file(MODEL)), f"the data file and run {run}")
    path = default_samples_path(run)
    if not path.exists():
        raise InputError(f"run {run} has no samples ({path}); run `bgp4 sample {run}` first")
    split = run / SPLIT  # the training frames: older runs count them as the MD frames they used
    info = {
        "settings": settings,
        "complete": rundir.completion(),
        "n_train": int(np.load(split)["train"].size) if split.is_file() else None,
        "same_data": same_data(settings, data),  # else its split's indices mean nothing in this file
    }
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
    rama_bins: int = A.N_BINS,
) -> dict[str, Any]:
    """Compare the sampled runs with the MD data; writes figures, metrics.json and report.md to `out`.

    `temperature` (K) is needed only for a data file that records none (a plain mdtraj file, whose
    frames' energies are then computed here).
    `rama_bins`: bins per axis of the Ramachandran KL and TV and their MD floors (64; the field's
    table histograms its KL on 100); the figures keep 64.
    For a peptide every residue with both backbone torsions gets its own Ramachandran figures and
    metrics (under "residues"); a molecule without a peptide backbone gets energies and weights only.
    """
    if not runs:
        raise InputError("name at least one run directory to analyze")
    rama_bins = check_rama_bins(rama_bins)
    SampleSettings(seed=seed, workers=workers).validated()  # --seed and --workers, checked as `bgp4 sample` does
    if Path(out).exists() and not Path(out).is_dir():
        raise InputError(f"report directory {out} (--out) is a file")
    data = load_trajectory(data_path, extras=("replica",))
    molecule = data.molecule()
    temperature = resolve_temperature(data.settings.get("temperature"), temperature, data_path)
    record = with_fingerprint({DATA: str(data_path)})
    loaded = [
        (Path(r), suffix, info, samples)
        for r in runs
        for suffix, info, samples in _load_samples(Path(r), molecule, record)
    ]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    split = loaded[0][0] / SPLIT if loaded[0][2]["same_data"] else None  # the first run's training frames
    metrics, ref = _md_reference(data, molecule, temperature, split, seed, workers, rama_bins)
    figures = _FigureData(ref)
    taken: set[str] = set()
    label = ""
    for run, suffix, info, samples in loaded:
        label = _run_label(run, taken) if not suffix else label + suffix  # a refined entry follows its run's
        taken.add(label)
        summary, u, angles, log_w = _model_entry(run, suffix, info, samples, ref, seed)
        metrics["models"][label] = summary
        figures.add(label, u, angles, A.normalized_weights(log_w) if summary["weights_defined"] else None)
    metrics["figures"] = figures.draw(out, metrics)
    # metrics.json last and whole: a sweep counts a run as analyzed by it (a kill leaves no half file)
    atomic_write(out / "report.md", render_report(metrics, data_path))
    atomic_write(out / "metrics.json", json.dumps(metrics, indent=1))
    return metrics


class _Angles(NamedTuple):
    """Backbone torsions (rad) of n frames: the molecule's own pair (n,) each, None without a
    backbone, and every residue's, (n, R) each."""

    phi: np.ndarray | None
    psi: np.ndarray | None
    res_phi: np.ndarray
    res_psi: np.ndarray


def _own_pair(molecule: Any, torsions: list[ResidueTorsions]) -> ResidueTorsions | None:
    """The pair of the flat single-pair metrics: the molecule's `phi` / `psi` (alanine dipeptide's,
    a peptide's central residue), else its central residue's; None without a peptide backbone."""
    if not torsions:
        return None
    phi, psi = getattr(molecule, "phi", None), getattr(molecule, "psi", None)
    if phi is None or psi is None:
        return central_pair(torsions)
    label = next((t.label for t in torsions if t.phi == tuple(phi) and t.psi == tuple(psi)), "")
    return ResidueTorsions(label, tuple(phi), tuple(psi))


def _angles(xyz: np.ndarray, molecule: Any, pair: ResidueTorsions | None, torsions: list[ResidueTorsions]) -> _Angles:
    """The torsions of frames `xyz` (n, n_atoms, 3) nm: of `pair` (if any) and of every residue."""
    own = None if pair is None else dihedral_angles(xyz, molecule, [pair.phi, pair.psi])
    res_phi, res_psi = residue_dihedrals(xyz, molecule, torsions)
    return _Angles(None if own is None else own[:, 0], None if own is None else own[:, 1], res_phi, res_psi)


@dataclass
class _Reference:
    """The MD data as the models are measured against it: energies u (kT), backbone torsions
    (the own pair and every residue's, rad), the low-energy threshold (kT); and u of the noisy
    reference frames."""

    molecule: Any
    kT: float  # kJ/mol
    xyz: np.ndarray  # the MD frames (n_frames, n_atoms, 3) nm
    settings: dict[str, Any]  # the data file's settings record
    u: np.ndarray
    u_noisy: np.ndarray
    pair: ResidueTorsions | None
    torsions: list[ResidueTorsions]
    angles: _Angles
    threshold: float
    bins: int  # per axis of the Ramachandran KL and TV


def _md_reference(
    data, molecule, temperature: float, split: Path | None, seed: int, workers: int, bins: int
) -> tuple[dict[str, Any], _Reference]:
    """The metrics of the MD data and of NOISE_FRAMES of its frames with noise (the start of
    metrics.json), and the reference the models are compared with. `split`: the training frames
    that set the low-energy threshold (None, or a split that does not fit the data: every frame).
    A file that stores no energies (a plain mdtraj file) has its frames' energies computed here."""
    kT = molecule.kT(temperature)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.permutation(data.n_frames)[:NOISE_FRAMES])
    u_md = md_energies_kjmol(data.xyz, data.energies, molecule.system, temperature, workers) / kT
    with OpenMMEnergy(molecule.system, temperature, n_workers=workers or None) as energy:
        u_noisy = energy.energies_kjmol(A.noisy_reference(data.xyz[pick], rng=rng)) / kT
    train_idx = np.load(split)["train"] if split is not None and split.exists() else np.arange(data.n_frames)
    if train_idx.size == 0 or train_idx.max() >= data.n_frames:
        train_idx = np.arange(data.n_frames)
    threshold = A.low_energy_threshold(u_md[train_idx])
    torsions = residue_torsions(molecule)
    pair = _own_pair(molecule, torsions)
    angles = _angles(data.xyz, molecule, pair, torsions)
    ref = _Reference(molecule, kT, data.xyz, data.settings, u_md, u_noisy, pair, torsions, angles, threshold, bins)
    replica = data.extras.get("replica")  # the block errors stay within one MD replica
    md = summarize_reference(u_md, threshold, phi=ref.angles.phi, groups=replica)
    md["residues"] = {t.label: state_summary(ref.angles.res_phi[:, i], replica) for i, t in enumerate(torsions)}
    metrics: dict[str, Any] = {
        "temperature_K": temperature,
        "kT_kJ_per_mol": kT,
        "low_energy_threshold_kT": threshold,
        "molecule": molecule.name,
        "torsion_pair": None if pair is None else pair.label,
        "ramachandran_bins": bins,
        "md": md,
        A.NOISE_KEY: summarize_reference(u_noisy, threshold, u_md_kT=u_md),
        "models": {},
    }
    return metrics, ref


def _model_entry(run: Path, suffix: str, info: dict[str, Any], samples, ref: _Reference, seed: int):
    """One samples file's metrics, with its u (kT), torsions (rad) and log weights for the figures."""
    u = samples.energies / ref.kT
    in_domain = samples.extras["in_domain"].astype(bool)
    log_q = np.where(in_domain, samples.extras["log_q"], np.nan)  # a wrong log q must not weigh
    if suffix:  # refined samples carry AIS weights: the log q that makes -u - log q equal them
        with np.errstate(invalid="ignore"):
            log_q = np.where(in_domain, -samples.energies / ref.kT - samples.extras["log_w"], np.nan)
    angles, md = _angles(samples.xyz, ref.molecule, ref.pair, ref.torsions), ref.angles
    defined, note = weights_status(info["complete"])
    summary = model_metrics(
        u,
        log_q,
        angles.phi,
        angles.psi,
        ref.u,
        md.phi,
        md.psi,
        ref.threshold,
        ref.bins,
        weights_defined=defined,
        weights_note=note,
        seed=seed,
        residues={
            t.label: TorsionPair(angles.res_phi[:, i], angles.res_psi[:, i], md.res_phi[:, i], md.res_psi[:, i])
            for i, t in enumerate(ref.torsions)
        },
    )
    evals = samples.settings.get("evals_per_sample", 1)
    summary.update(
        log_q_note=None if "log_q" in samples.settings else OLD_LOG_Q,
        model=info["settings"].get("model"),
        run=str(run),
        out_of_domain=int(np.count_nonzero(~in_domain)),
        test_nll=info["complete"].get("test_nll_end"),
        train_wall_s=info["complete"].get("wall_s"),
        energy_evals_per_sample=evals,
        **cost_metrics(
            info["complete"], info["settings"], ref.settings, info["n_train"], u.size, evals, n_data_frames=len(ref.u)
        ),
    )
    if suffix:  # the refined samples have no density of their own: the run's entry has its forward ESS
        summary.update(
            forward_ess=None,
            forward_ess_frames=None,
            forward_ess_nonfinite_log_q=None,
            forward_ess_note="AIS samples have no density q",
        )
    else:
        summary.update(
            forward_metrics(run, ref.xyz, ref.u, summary["weights_defined"], seed, same_data=info["same_data"])
        )
    log_w = A.log_weights(u, log_q)
    if summary["weights_defined"] and samples.settings.get("resampled_levels") and "ancestor" in samples.extras:
        summary["reverse_ess_lineage"] = lineage_ess(log_w, samples.extras["ancestor"])
    return summary, u, angles, log_w


class _FigureData:
    """What the figures show, gathered column by column: MD first, then each samples file."""

    def __init__(self, ref: _Reference):
        self.threshold = ref.threshold
        self.violins = {"MD": ref.u, "MD + noise": ref.u_noisy}
        self.rama: dict[str, tuple] = {}
        self.free: dict[str, tuple] = {}
        # one residue that is the molecule's own pair (alanine dipeptide): the Ramachandran figure shows it already
        only_own = len(ref.torsions) == 1 and ref.pair is not None and ref.pair.label == ref.torsions[0].label
        self.residues: dict[str, dict[str, tuple]] = {} if only_own else {t.label: {} for t in ref.torsions}
        self.add("MD", None, ref.angles, None)

    def add(self, label: str, u: np.ndarray | None, angles: _Angles, weights: np.ndarray | None) -> None:
        """One column: energies u (kT), torsions (rad), normalized weights where they are defined."""
        if u is not None:
            self.violins[label] = u
        for i, panels in enumerate(self.residues.values()):
            panels[label] = (angles.res_phi[:, i], angles.res_psi[:, i], None)
        if angles.phi is None:
            return
        self.rama[label] = (angles.phi, angles.psi, None)
        self.free[label] = A.free_energy_1d(angles.phi)
        if weights is not None:  # an undefined weight would draw noise as a curve
            self.free[f"{label} reweighted"] = A.free_energy_1d(angles.phi, weights=weights)

    def draw(self, out: Path, metrics: dict[str, Any]) -> dict[str, list[str]]:
        """Draw the energy violins and, with a backbone, the Ramachandran panels, the free energies
        along phi and (for more than the one residue of the own pair) every residue's Ramachandran
        panels; their file names."""
        low = {
            "MD": metrics["md"]["low_energy_fraction"],
            "MD + noise": metrics[A.NOISE_KEY]["low_energy_fraction"],
        }
        low.update({k: v["low_energy_fraction"] for k, v in metrics["models"].items()})
        figures = {"energies": plots.energy_violins(self.violins, low, out / "energies", threshold=self.threshold)}
        if self.rama:
            figures["ramachandran"] = plots.ramachandran_panels(self.rama, out / "ramachandran")
            figures["free_energy_phi"] = plots.free_energy_phi(self.free, out / "free_energy_phi")
        if self.residues:
            figures["ramachandran_residues"] = plots_residues.residue_ramachandran(
                self.residues, out / "ramachandran_residues"
            )
        return {k: [p.name for p in v] for k, v in figures.items()}
