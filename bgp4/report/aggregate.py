"""The report of a sweep: every metric over seeds, with 95 % intervals and paired comparisons.

Each run of a sweep has its own `report/metrics.json` from `bgp4.report.analyze.analyze`; this module
collects the numeric per-model metrics of those files (whatever keys the analysis writes), and
per model and metric computes the mean over seeds with a Student-t 95 % interval. Each model is
compared with the first one seed by seed (the same seed means the same train/test split and the
same sample seed): the mean paired difference, its t interval and a paired t-test p-value.
Writes `report/metrics.json` (per-seed values too), `report/report.md`, `report/seeds.png/.pdf`
(every seed a dot, mean and interval) and `report/energies.png/.pdf` (violins pooled per model).
"""

from __future__ import annotations

import json
import math
import sys
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import numpy as np

from bgp4._io import atomic_write
from bgp4.analysis.grid import N_BINS, check_rama_bins, grid_label, report_grid
from bgp4.errors import InputError, first_line
from bgp4.report.seeds import LEVEL, paired_difference, t_interval
from bgp4.stage import Stage

# Lazy, inside the functions that need them: bgp4.analysis.plots (matplotlib), bgp4.simulation.data (mdtraj),
# bgp4.generator.sample and bgp4.report.analyze (torch). The CLI and the sweep client import this module at
# their start, which stays free of those; the sweep client loads them in the background while the runs
# train (bgp4.sweep.runner._import_report_modules).

__all__ = ["collect", "render", "summarize_sweep", "sweep_grid", "write_sweep_report"]

#: Seconds to wait for figures drawn through an executor before drawing them locally instead.
FIGURE_TIMEOUT_S = 300
#: Display order and labels of the metrics bgp4's analysis is known to write; others follow by name.
KNOWN: dict[str, str] = {
    "energy_shift_kT": "energy shift vs MD (kT)",
    "median_energy_kT": "median energy (kT)",
    "mean_energy_kT": "mean energy (kT)",
    "energy_w2": "energy W2 (kT)",
    "low_energy_fraction": "low-energy fraction",
    "reverse_ess": "reverse ESS",
    "log10_reverse_ess": "log10 reverse ESS",
    "reverse_ess_clipped": "reverse ESS, top 1e-4 of log w clipped",
    "forward_ess": "forward ESS (held-out MD frames)",
    "ramachandran_kl": "Ramachandran KL",
    "ramachandran_kl_reweighted": "Ramachandran KL, reweighted",
    "ramachandran_tv": "Ramachandran TV",
    "ramachandran_tv_reweighted": "Ramachandran TV, reweighted",
    "energy_shift_reweighted_kT": "energy shift vs MD, reweighted (kT)",
    "energy_w2_reweighted": "energy W2, reweighted (kT)",
    "p_phi_positive": "P(phi > 0)",
    "p_phi_positive_reweighted": "P(phi > 0), reweighted",
    "dF_phi_kT": "dF(phi > 0) (kT)",
    "dF_phi_reweighted_kT": "dF(phi > 0), reweighted (kT)",
    "test_nll": "test NLL (nats)",
    "train_wall_min": "training wall time (min)",
    "n_nonfinite": "samples with non-finite energy",
    "out_of_domain": "samples outside the IC domain",
    "n_zero_weight": "samples with zero weight",
    "energy_evals_per_sample": "energy evaluations per sample",
    "energy_evaluations_total": "target energy evaluations (training + sampling)",
    "train_energy_evaluations": "target energy evaluations of training",
    "sample_energy_evaluations": "target energy evaluations of sampling",
    "md_energy_evaluations": "MD energy evaluations of the data file",
    "train_md_frames": "MD frames drawn by the losses",
    "train_md_frames_energy_evaluations": "MD energy evaluations behind the frames drawn by the losses",
}
#: Bookkeeping numbers of a run, properties of the MD data (sampling floors), and figures that
#: only restate others (errors against MD = value - MD; interval ends of a run's own ESS).
SKIPPED = {
    "n_samples",
    "train_wall_s",
    "ramachandran_kl_floor",
    "ramachandran_tv_floor",
    "ramachandran_kl_floor_ess",
    "ramachandran_tv_floor_ess",
    "reverse_ess_ci_low",
    "reverse_ess_ci_high",
    "forward_ess_frames",
    "forward_ess_nonfinite_log_q",
}


#: Per-residue metrics a sweep aggregates, as "<key> [<residue>]" (the residue of the flat
#: single-pair keys is left out: its numbers are those keys').
RESIDUE_KEYS = ("dF_phi_kT", "dF_phi_reweighted_kT", "ramachandran_tv", "ramachandran_tv_reweighted")


def _label(key: str) -> str:
    """A metric's label: KNOWN's, with the residue of a per-residue key ("dF_phi_kT [ALA3]")."""
    base, _, residue = key.partition(" [")
    return f"{KNOWN.get(base, base)}, {residue.rstrip(']')}" if residue else KNOWN.get(key, key)


def _metric_order(keys: set[str]) -> list[str]:
    return [k for k in KNOWN if k in keys] + sorted(keys - set(KNOWN))


def _numeric_metrics(
    summary: dict[str, Any], complete: dict[str, Any], pair: str | None = None
) -> dict[str, float | None]:
    """The numeric scalars of one run's per-model metrics, plus test NLL, training time and the
    `RESIDUE_KEYS` of every residue but `pair` (the residue of the flat keys)."""
    values = {
        k: (None if v is None else float(v))
        for k, v in summary.items()
        if k not in SKIPPED
        and "_error" not in k
        and not k.endswith("_note")
        and (v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)))
    }
    for residue, numbers in (summary.get("residues") or {}).items():
        if residue != pair:
            values.update({f"{k} [{residue}]": numbers.get(k) for k in RESIDUE_KEYS})
    if values.get("test_nll") is None and complete.get("test_nll_end") is not None:
        values["test_nll"] = float(complete["test_nll_end"])
    if complete.get("wall_s") is not None:
        values["train_wall_min"] = float(complete["wall_s"]) / 60.0
    ess = values.get("reverse_ess")
    if ess is not None and ess > 0:  # ESS spans orders of magnitude: its log is the better-behaved statistic
        values["log10_reverse_ess"] = math.log10(ess)
    return values


def collect(sweep_dir: str | Path) -> tuple[dict[str, Any], dict[str, dict[int, dict[str, Any]]]]:
    """(sweep record, variant -> seed -> {values, run, samples, kT, threshold}) of the runs that have
    a report. A run refined by AIS gives a second variant, "<variant> +AIS(K)" (its refined samples),
    listed in the record's models right after its own."""
    from bgp4.generator.sample import default_samples_path, refined_path

    sweep_dir = Path(sweep_dir)
    record_path = sweep_dir / "sweep.json"
    if not record_path.exists():
        raise InputError(f"{sweep_dir} is not a bgp4 sweep directory (no sweep.json)")
    record = json.loads(record_path.read_text())
    runs: dict[str, dict[int, dict[str, Any]]] = {m: {} for m in record["models"]}
    for name, info in record["runs"].items():
        run = sweep_dir / "runs" / name
        path = run / "report" / "metrics.json"
        if not path.exists():
            continue
        metrics = json.loads(path.read_text())
        complete = Stage(run).completion()  # the training run's summary ({} if unfinished)
        for label, summary in metrics["models"].items():
            suffix = label[label.index(" +AIS") :] if " +AIS" in label else ""
            samples = default_samples_path(run)
            runs.setdefault(info["model"] + suffix, {})[int(info["seed"])] = {
                "run": run,
                "samples": refined_path(samples) if suffix else samples,
                "values": _numeric_metrics(summary, complete, metrics.get("torsion_pair")),
                "kT": metrics["kT_kJ_per_mol"],
                "threshold": metrics["low_energy_threshold_kT"],
            }
    record["models"] = [v for m in record["models"] for v in runs if v == m or v.startswith(m + " +AIS")]
    return record, runs


def summarize_sweep(models: list[str], runs: dict[str, dict[int, dict[str, Any]]]) -> dict[str, Any]:
    """Per metric: per-model seeds, values, mean and interval; paired differences against models[0]."""
    keys = _metric_order({k for per_seed in runs.values() for r in per_seed.values() for k in r["values"]})
    reference = models[0]
    out: dict[str, Any] = {}
    for key in keys:
        entry: dict[str, Any] = {"label": _label(key), "models": {}, "paired": {}}
        for model in models:
            per_seed = {seed: r["values"].get(key) for seed, r in sorted(runs[model].items())}
            entry["models"][model] = {
                **t_interval(list(per_seed.values())),
                "values": {str(s): v for s, v in per_seed.items()},
            }
        for model in models[1:]:
            seeds = sorted(set(runs[model]) & set(runs[reference]))
            entry["paired"][model] = {
                **paired_difference(
                    [runs[model][s]["values"].get(key) for s in seeds],
                    [runs[reference][s]["values"].get(key) for s in seeds],
                ),
                "against": reference,
            }
        out[key] = entry
    return out


def _fmt(value: float | None, width: float | None = None) -> str:
    """3 significant digits; with an interval `width`, enough decimals to show it (-146.72, not -147)."""
    if value is None:
        return "n/a"
    if width is not None and math.isfinite(width) and width > 0 and math.isfinite(value):
        # an interval wider than 10 needs no decimals, never negative ones (a format error)
        decimals = max(0, 1 - math.floor(math.log10(width)))
        shown = 2 - math.floor(math.log10(abs(value))) if value else 0  # decimals that 3 digits show
        if shown < decimals <= 6:
            return f"{value:.{decimals}f}"
    return f"{value:.3g}"


def _interval(entry: dict[str, Any]) -> str:
    if entry["mean"] is None:
        return "n/a"
    if entry["low"] is None:
        return f"{entry['mean']:.4g} (n={entry['n']})"
    width = entry["high"] - entry["low"]
    return f"{_fmt(entry['mean'], width)} [{_fmt(entry['low'], width)}, {_fmt(entry['high'], width)}]"


def _sentence(model: str, reference: str, summary: dict[str, Any]) -> str:
    """A plain paragraph on `model` vs `reference`: the significant differences, then the rest."""
    significant, unclear = [], []
    n = 0
    for entry in summary.values():
        d = entry["paired"][model]
        n = max(n, d["n"])
        if d["p"] is not None and d["p"] < 1 - LEVEL:
            direction = "higher" if d["mean"] > 0 else "lower"
            significant.append(
                f"{direction} {entry['label']} ({d['mean']:+.3g}, {LEVEL:.0%} CI {_fmt(d['low'])} to "
                f"{_fmt(d['high'])}, p = {d['p']:.2g})"
            )
        elif d["n"] >= 2:
            unclear.append(entry["label"])
    if n < 2:
        return f"- **{model} vs {reference}**: fewer than 2 paired seeds, no test possible."
    text = f"- **{model} vs {reference}** ({n} paired seeds): "
    text += "; ".join(significant) + ". " if significant else "no difference is significant at the 5 % level. "
    if significant and unclear:
        text += "Not distinguishable from seed noise (p >= 0.05): " + ", ".join(unclear) + "."
    return text.strip()


def render(record: dict[str, Any], summary: dict[str, Any]) -> str:
    """Markdown: the table of means and intervals, paired differences, and the figures."""
    models = record["models"]
    counts = {m: max((e["models"][m]["n"] for e in summary.values()), default=0) for m in models}
    header = ["metric"] + [f"{m} (n={counts[m]})" for m in models] + [f"{m} - {models[0]}" for m in models[1:]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in summary.values():
        cells = [entry["label"]] + [_interval(entry["models"][m]) for m in models]
        for m in models[1:]:
            d = entry["paired"][m]
            cells.append(_interval(d) + ("" if d["p"] is None else f", p = {d['p']:.2g}"))
        lines.append("| " + " | ".join(cells) + " |")
    comparisons = "\n".join(_sentence(m, models[0], summary) for m in models[1:]) or "(one model: nothing to compare)"
    return (
        "# bgp4 sweep report\n\n"
        f"MD data: `{record['data']}`; models {', '.join(models)}; seeds {', '.join(map(str, record['seeds']))}.\n"
        f"Each cell: mean over seeds [{LEVEL:.0%} Student-t interval]. Differences are paired by seed "
        "(same train/test split and sample seed) with a paired t-test. "
        f"Ramachandran KL and TV on {grid_label(record.get('ramachandran_bins', N_BINS))} bins of (phi, psi).\n\n"
        + "\n".join(lines)
        + "\n\n## Comparisons\n\n"
        + comparisons
        + "\n\n## Figures\n\n"
        "Every seed (dots) with the mean and its interval:\n\n![seeds](seeds.png)\n\n"
        "Sample energies pooled over seeds (kT):\n\n![energies](energies.png)\n"
    )


def seeds_figure(models: list[str], summary: dict[str, Any], path: Path) -> list[Path]:
    """The seeds figure (`bgp4.analysis.plots.seed_panels`), imported when drawn: matplotlib stays
    out of the CLI's start-up."""
    from bgp4.analysis import plots

    return plots.seed_panels(models, summary, path)


def energies_figure(record: dict[str, Any], runs: dict[str, dict[int, dict[str, Any]]], path: Path) -> list[Path]:
    """Energy violins: MD, then each model's samples pooled over its seeds (kT)."""
    from bgp4.analysis import plots
    from bgp4.simulation.data import load_trajectory, resolve_temperature
    from bgp4.simulation.energy import md_energies_kjmol

    done = [(m, r) for m in record["models"] for r in runs[m].values()]
    if not done:
        return []
    kT = done[0][1]["kT"]
    data = load_trajectory(record["data"])
    molecule = data.molecule()
    n_atoms = molecule.n_atoms
    temperature = resolve_temperature(
        data.settings.get("temperature"), (record.get("train") or {}).get("temperature"), record["data"]
    )
    columns = {"MD": md_energies_kjmol(data.xyz, data.energies, molecule.system, temperature) / kT}
    threshold = float(np.mean([r["threshold"] for _, r in done]))
    low = {"MD": float(np.mean(columns["MD"] < threshold))}
    for model in record["models"]:
        if not runs[model]:
            continue
        energies = [load_trajectory(r["samples"], n_atoms=n_atoms).energies / kT for r in runs[model].values()]
        columns[model] = np.concatenate(energies)
        fractions = [r["values"].get("low_energy_fraction") for r in runs[model].values()]
        low[model] = t_interval(fractions)["mean"]
    return plots.energy_violins(columns, low, path, threshold=threshold)


def _draw(jobs: dict[str, tuple], executor: Executor | None) -> dict[str, list[Path]]:
    """Run each figure job (function, *args): through `executor` when given, side by side, else
    (or when that fails: a worker that died or cannot see the directory) here, one after the other."""
    if executor is not None:
        pending = {}
        try:
            for name, job in jobs.items():  # one by one: a failed submit still cancels the jobs before it
                pending[name] = executor.submit(*job)
            return {name: future.result(timeout=FIGURE_TIMEOUT_S) for name, future in pending.items()}
        except Exception as error:  # noqa: BLE001 - drawn here instead, and said so
            for future in pending.values():
                future.cancel()  # a queued job never starts; a running one writes its figures atomically
            print(
                f"sweep figures not drawn by the workers ({first_line(error, 160, typed=True)}); drawing them here",
                file=sys.stderr,
            )
    return {name: function(*args) for name, (function, *args) in jobs.items()}


def sweep_grid(sweep_dir: str | Path) -> int:
    """The Ramachandran grid a sweep reports on: that of its last report, else N_BINS."""
    return report_grid(Path(sweep_dir) / "report") or N_BINS


def write_sweep_report(
    sweep_dir: str | Path,
    refresh: bool = False,
    workers: int = 0,
    executor: Executor | None = None,
    rama_bins: int | None = None,
) -> dict[str, Any]:
    """Aggregate the runs of a sweep into `<sweep_dir>/report/`; returns the metrics written.

    `rama_bins`: the Ramachandran grid (None: that of the sweep's last report, else 64). Runs
    that are sampled but have no per-run report, or one on another grid (or all of them, with
    `refresh`), are analyzed first, with the current `bgp4 analyze`; InputError when a run's report
    is on another grid and its samples are gone. With an `executor` (e.g. a Dask client's, whose
    workers see `sweep_dir`) the two figures are drawn there, side by side.
    """
    from bgp4.generator.sample import default_samples_path
    from bgp4.report.analyze import analyze

    sweep_dir = Path(sweep_dir)
    rama_bins = sweep_grid(sweep_dir) if rama_bins is None else check_rama_bins(rama_bins)
    record, _ = collect(sweep_dir)
    other = []  # runs on another grid that cannot be analyzed again
    for name in record["runs"]:
        run = sweep_dir / "runs" / name
        grid = report_grid(run / "report")
        if default_samples_path(run).exists() and (refresh or grid != rama_bins):
            seed = int(record["runs"][name]["seed"])
            temperature = (record.get("train") or {}).get("temperature")  # of a data file that records none
            analyze(
                record["data"],
                [run],
                run / "report",
                seed=seed,
                workers=workers,
                temperature=temperature,
                rama_bins=rama_bins,
            )
        elif grid not in (None, rama_bins):
            other.append(name)
    if other:
        raise InputError(f"runs {', '.join(other)} have reports on another Ramachandran grid and no samples to analyze")
    record, runs = collect(sweep_dir)
    if not any(runs.values()):
        raise InputError(f"no run of {sweep_dir} has been analyzed yet; run the sweep first")
    record["ramachandran_bins"] = rama_bins
    summary = summarize_sweep(record["models"], runs)
    out = sweep_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    figures = _draw(
        {
            "seeds": (seeds_figure, record["models"], summary, out / "seeds"),
            "energies": (energies_figure, record, runs, out / "energies"),
        },
        executor,
    )
    metrics = {
        "models": record["models"],
        "seeds": record["seeds"],
        "level": LEVEL,
        "reference_model": record["models"][0],
        "ramachandran_bins": rama_bins,
        "metrics": summary,
        "figures": {k: [p.name for p in v] for k, v in figures.items()},
    }
    atomic_write(out / "report.md", render(record, summary))
    atomic_write(out / "metrics.json", json.dumps(metrics, indent=1))  # last: the report's marker
    return metrics
