"""`report.md` of the analysis stage: the metric definitions, the comparison table, every
residue's backbone states, and the figures.

Reads only the metrics dict that `bgp4.report.analyze.analyze` writes to `metrics.json`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bgp4.analysis.estimators import N_BINS, NOISE_KEY, NOISE_SIGMA_NM
from bgp4.analysis.grid import grid_label
from bgp4.analysis.metrics import PAIR_KEYS, PAIR_REWEIGHTED_KEYS, REWEIGHTED_KEYS

__all__ = [
    "NOT_DEFINED",
    "OPTIONAL_KEYS",
    "format_number",
    "metrics_section",
    "no_backbone_note",
    "render_report",
]


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


def _with_se(value: Any, se: Any) -> str:
    """An MD value with its block standard error."""
    return _fmt(value) if se is None else f"{_fmt(value)} ± {_fmt(se, 2)}"


NOT_DEFINED = "not defined"
#: Rows shown only when some model has them (SMC-resampled samples only).
OPTIONAL_KEYS = {"reverse_ess_lineage"}
#: Keys beyond `REWEIGHTED_KEYS` that need importance weights.
_WEIGHTED = set(REWEIGHTED_KEYS) | OPTIONAL_KEYS | {"forward_ess"}
#: Keys of the Ramachandran and phi-state rows: left out for a molecule without a peptide backbone.
_ANGLE_KEYS = set(PAIR_KEYS) | set(PAIR_REWEIGHTED_KEYS)
#: A table cell: one model's metrics -> text.
Cell = Callable[[dict[str, Any]], str]
Row = tuple[str, Cell, tuple[str, ...]]


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


def _forward(m: dict[str, Any]) -> str:
    frames, nonfinite = m.get("forward_ess_frames"), m.get("forward_ess_nonfinite_log_q")
    text = _fmt(m.get("forward_ess")) + ("" if frames is None else f", N = {frames}")
    return text + (f", {nonfinite} with non-finite log q" if nonfinite else "")


def _count(value: Any) -> str:
    """An evaluation count: exact below a million, else 3 significant digits (4.2e+08)."""
    return "n/a" if value is None else (f"{value:,}" if value < 1_000_000 else f"{value:.3g}")


def _counted(key: str) -> Cell:
    return lambda m: _count(m.get(key))


def _evaluations(m: dict[str, Any]) -> str:
    return (
        f"{_count(m.get('train_energy_evaluations'))} + {_count(m.get('sample_energy_evaluations'))} = "
        f"{_count(m.get('energy_evaluations_total'))}"
    )


def _md_frames(m: dict[str, Any]) -> str:
    return f"{_count(m.get('train_md_frames'))} ({_count(m.get('train_md_frames_energy_evaluations'))})"


def _pair_rows(p_label: str, df_label: str, kl: bool = True) -> list[Row]:
    """The Ramachandran (KL only with `kl`) and phi > 0 state rows of one (phi, psi) pair."""
    kl_rows: list[Row] = [
        ("Ramachandran KL (MD floor)", _with_floor("ramachandran_kl", "ramachandran_kl_floor"), ("ramachandran_kl",)),
        (
            "Ramachandran KL, reweighted (MD floor at ESS·N)",
            _with_floor("ramachandran_kl_reweighted", "ramachandran_kl_floor_ess"),
            ("ramachandran_kl_reweighted",),
        ),
    ]
    return (kl_rows if kl else []) + [
        ("Ramachandran TV (MD floor)", _with_floor("ramachandran_tv", "ramachandran_tv_floor"), ("ramachandran_tv",)),
        (
            "Ramachandran TV, reweighted (MD floor at ESS·N)",
            _with_floor("ramachandran_tv_reweighted", "ramachandran_tv_floor_ess"),
            ("ramachandran_tv_reweighted",),
        ),
        (p_label, _with_error("p_phi_positive", "p_phi_positive_error"), ("p_phi_positive",)),
        (
            "P(phi > 0), reweighted",
            _with_error("p_phi_positive_reweighted", "p_phi_positive_reweighted_error"),
            ("p_phi_positive_reweighted",),
        ),
        (df_label, _with_error("dF_phi_kT", "dF_phi_error_kT"), ("dF_phi_kT",)),
        (
            "dF(phi), reweighted (kT)",
            _with_error("dF_phi_reweighted_kT", "dF_phi_reweighted_error_kT"),
            ("dF_phi_reweighted_kT",),
        ),
    ]


def _rows(md: dict[str, Any]) -> list[Row]:
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
        ("reverse ESS, top 1e-4 of log w clipped", _plain("reverse_ess_clipped"), ("reverse_ess_clipped",)),
        ("forward ESS on held-out MD frames", _forward, ("forward_ess",)),
        ("target energy evaluations: training + sampling", _evaluations, ("energy_evaluations_total",)),
        ("MD energy evaluations of the data file", _counted("md_energy_evaluations"), ("md_energy_evaluations",)),
        ("MD frames drawn by the losses (their MD energy evaluations)", _md_frames, ("train_md_frames",)),
        ("reverse ESS by SMC lineage", _plain("reverse_ess_lineage"), ("reverse_ess_lineage",)),
        *_pair_rows(f"P(phi > 0) (MD {p_md})", f"dF(phi) (kT) (MD {df_md})"),
        ("test NLL (nats)", _places("test_nll", 3), ("test_nll",)),
        ("energy evaluations per sample", _plain("energy_evals_per_sample"), ("energy_evals_per_sample",)),
    ]


def _cell(m: dict[str, Any], show: Cell, keys: tuple[str, ...]) -> str:
    """One model's cell; "not defined" where the keys need importance weights the model lacks."""
    if not m.get("weights_defined") and any(k in _WEIGHTED for k in keys):
        return NOT_DEFINED
    return show(m)


#: The metric definitions; "{grid}" stands for the Ramachandran grid (`metrics_section` fills it in).
_METRICS_TEMPLATE = (
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
    "- **reverse ESS, top 1e-4 of log w clipped**: the reverse ESS as the field's table computes it "
    "(von Klitzing et al. 2025, table 1; the rule of TA-BG's evaluation code): with k = int(1e-4 N), "
    "the log weights above the k-th largest are lowered to it before the Kish formula (k - 1 of them; "
    "none under 20,000 samples).\n"
    "- **forward ESS on held-out MD frames**: with w_i = exp(-u(x_i) - log q(x_i)) for MD frames x_i "
    "~ p that training never saw (at most 10,000, a seeded choice: the frames the run held out when the "
    "data file is its training data, else any of the file's frames), ESS / N = N^2 / (sum w "
    "sum 1/w) = 1 / (mean(w) mean(1/w)) (Midgley et al. 2023); it drops to 0 when q misses a region "
    "that MD visits, which the reverse ESS cannot see, and when a frame's log q is not finite (counted "
    "in the cell). Given for a run's own samples only (AIS samples have no density q).\n"
    "- **target energy evaluations**: OpenMM energy evaluations of training (with the runs it started "
    "from) + those of the samples (one per flow sample; every AIS level's for refined samples).\n"
    "- **MD energy evaluations of the data file**: the MD integration steps (one energy evaluation "
    "each) of the whole simulation behind the data file, as the field's table counts them: frames x "
    "steps between frames (x the temperatures for replica exchange), plus every replica's or walker's "
    "equilibration.\n"
    "- **MD frames drawn by the losses**: the MD frames the training losses drew from, with the MD "
    "integration steps behind just those frames in brackets (equilibration not counted).\n"
    "- **the table's Ramachandran KL and TV**: both on the grid named under Ramachandran KL "
    "(`bgp4 analyze --rama-bins`, 64 by default); the table's lineage histograms its KL on 100 x 100 "
    "bins (`--rama-bins 100`; its TV's grid is not stated). A figure, its floor and their ratio hold for "
    "their own grid and sample count only.\n"
    "- **reverse ESS by SMC lineage** (only for samples refined with resampling): resampling copies "
    "samples, and the copies' equal weights make the plain Kish ESS overstate; here the weights of all "
    "samples that descend from one starting sample are summed first and the Kish ESS of those sums is "
    "divided by N (copies counted as fully correlated: a lower estimate).\n"
    "- **Ramachandran KL**: KL(MD || model) of {grid} (phi, psi) histograms on [-pi, pi]^2 (density "
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
    "- **MD ± value**: the block standard error of the MD value (20 contiguous blocks of frames, each "
    "within one MD replica; for dF by the delta method); it holds when a block is much longer than the "
    "time between crossings of phi = 0.\n"
    "- **reweighted figures** are given only where the importance weights are defined: p and q must live "
    "on the same space, so every constrained bond of the system must be held fixed (not a flow "
    "dimension).\n"
)


def metrics_section(bins: int = N_BINS) -> str:
    """The report's metric definitions, with the Ramachandran grid of `bins` x `bins` bins."""
    return _METRICS_TEMPLATE.replace("{grid}", grid_label(bins))


def no_backbone_note(molecule: str) -> str:
    """The report's one line for a molecule without a peptide backbone."""
    return (
        f"{molecule} has no peptide backbone (no residue with both phi and psi), so this report shows "
        "energies and weights only."
    )


def _table(models: dict[str, Any], rows: list[Row]) -> str:
    """The comparison table: a column per model; optional rows only where some model has them."""
    header = "| metric | " + " | ".join(models) + " |\n|---|" + "---|" * len(models) + "\n"
    return header + "".join(
        f"| {name} | " + " | ".join(_cell(m, show, keys) for m in models.values()) + " |\n"
        for name, show, keys in rows
        if not set(keys) <= OPTIONAL_KEYS or any(k in m for m in models.values() for k in keys)
    )


def _residue_section(metrics: dict[str, Any]) -> str:
    """Every residue's phi > 0 state and Ramachandran TV: MD (± its block error) beside each model."""
    models, md_residues = metrics["models"], metrics["md"].get("residues") or {}
    if not md_residues:
        return ""
    rows = _pair_rows("P(phi > 0)", "dF(phi) (kT)", kl=False)
    md_cells = {
        "p_phi_positive": lambda r: _with_se(r.get("p_phi_positive"), r.get("p_phi_positive_se")),
        "dF_phi_kT": lambda r: _with_se(r.get("dF_phi_kT"), r.get("dF_phi_se_kT")),
    }
    header = "| residue | metric | MD | " + " | ".join(models) + " |\n|---|---|---|" + "---|" * len(models) + "\n"
    lines = []
    for residue, md in md_residues.items():
        for name, show, keys in rows:
            # a residue's reweighted cells are defined where its model's weights are
            own = [
                {**m.get("residues", {}).get(residue, {}), "weights_defined": m.get("weights_defined")}
                for m in models.values()
            ]
            cells = [_cell(values, show, keys) for values in own]
            md_cell = md_cells[keys[0]](md) if keys[0] in md_cells else ""
            lines.append(f"| {residue} | {name} | {md_cell} | " + " | ".join(cells) + " |\n")
    return (
        "\n## Per residue\n\n"
        "The backbone torsions of every residue that has both phi and psi (mdtraj's definitions); MD "
        "values ± their block standard error; error = model - MD; floors as in the table above.\n\n"
        + header
        + "".join(lines)
    )


#: The report's notes, one kind after another: (whether a model's metrics need it, its text).
_NOTES: tuple[tuple[Callable[[dict[str, Any]], Any], Callable[[dict[str, Any]], str]], ...] = (
    (
        lambda m: not m.get("weights_defined"),
        lambda m: (
            f"importance weights {NOT_DEFINED} ({m.get('weights_note')}), so no reverse ESS and no reweighted figures"
        ),
    ),
    (
        lambda m: m.get("ramachandran_floor_note"),
        lambda m: f"Ramachandran MD floor undefined ({m['ramachandran_floor_note']})",
    ),
    (lambda m: m.get("log_q_note"), lambda m: m["log_q_note"]),
)


def _notes(models: dict[str, Any]) -> str:
    return "".join(f"- {label}: {text(m)}.\n" for needed, text in _NOTES for label, m in models.items() if needed(m))


def _figures(backbone: bool, residues: bool) -> str:
    text = "\n## Figures\n\nEnergies (kT):\n\n![energies](energies.png)\n"
    if not backbone:
        return text
    text += (
        "\nRamachandran plots (log density, shared scale):\n\n![ramachandran](ramachandran.png)\n\n"
        "Free energy along phi, raw and (where the weights are defined) reweighted:\n\n"
        "![free energy](free_energy_phi.png)\n"
    )
    if residues:
        text += "\nRamachandran plots of every residue:\n\n![residues](ramachandran_residues.png)\n"
    return text


def _md_line(metrics: dict[str, Any], backbone: bool) -> str:
    md, noisy = metrics["md"], metrics[NOISE_KEY]
    text = (
        f"MD mean energy {_fmt(md['mean_energy_kT'])} kT; with {NOISE_SIGMA_NM} nm Gaussian noise "
        f"{_fmt(noisy['mean_energy_kT'])} kT (shift {_fmt(noisy.get('energy_shift_kT'))} kT, "
        f"low-energy fraction {_fmt(noisy['low_energy_fraction'])})."
    )
    if not backbone:
        return text + "\n\n" + no_backbone_note(metrics.get("molecule", "The molecule")) + "\n\n"
    return (
        text + f" MD P(phi > 0) = {_with_se(md.get('p_phi_positive'), md.get('p_phi_positive_se'))}, "
        f"dF(phi) = {_with_se(md.get('dF_phi_kT'), md.get('dF_phi_se_kT'))} kT"
        + (f" (phi and psi of {metrics['torsion_pair']})" if metrics.get("torsion_pair") else "")
        + ".\n\n"
    )


def render_report(metrics: dict[str, Any], data_path: str | Path) -> str:
    """Markdown: the metric definitions, the comparison table, every residue's states and the figures."""
    models = metrics["models"]
    backbone = "p_phi_positive" in metrics["md"]  # the MD column has the phi states only with a backbone
    rows = [row for row in _rows(metrics["md"]) if backbone or not set(row[2]) & _ANGLE_KEYS]
    notes = _notes(models)
    return (
        "# bgp4 report\n\n"
        f"MD data: `{data_path}` at {metrics['temperature_K']:g} K (kT = {metrics['kT_kJ_per_mol']:.4f} kJ/mol). "
        f"Low-energy threshold (max energy of the training frames): {metrics['low_energy_threshold_kT']:.2f} kT.\n\n"
        + _md_line(metrics, backbone)
        + metrics_section(metrics.get("ramachandran_bins", N_BINS))
        + "\n## Models\n\n"
        + _table(models, rows)
        + "\nSamples outside the internal-coordinate domain carry no importance weight (their log q is not valid).\n"
        + (f"\n{notes}" if notes else "")
        + _residue_section(metrics)
        + _figures(backbone, "ramachandran_residues" in metrics.get("figures", {}))
    )
