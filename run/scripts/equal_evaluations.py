"""Reverse ESS against the target energy evaluations spent, per objective, from a sweep over objectives.

The field compares generators at an equal number of energy evaluations, with the MD frames a
generator learned from counted as evaluations (one per MD step behind each frame). For every run
of a `bgp4 sweep --objectives ...` directory this draws:

- the final point: the run's reverse ESS from its own `report/metrics.json` (`bgp4 analyze`, the raw
  generator's samples) at x = MD evaluations of the frames it drew + its training evaluations;
- for objectives that sample the flow while training (mixed, kl, fab), the curve of the ESS of the
  flow's own samples logged during training (`metrics.jsonl`: fab's `flow_ess`, the batch ESS
  `batch_ess` of kl and mixed) at the evaluations spent so far.

Prints one line per run (objective, seed, evaluations, ESS) and writes FIG.png and FIG.pdf.
SWEEP may also be a study folder that keeps a sweep's report without its runs
(`REPORT/metrics.json` and `REPORT/<model>-s<seed>-metrics.jsonl`, as run/results/equal-evaluations
keeps them). `--extra LABEL=REPORT` adds a run outside the sweep (e.g. FAB from scratch) by its
`bgp4 analyze` report directory, whose metrics.json names the run (or, where that run is gone, whose
parent folder holds its `training-metrics.jsonl`); repeatable.

    python run/scripts/equal_evaluations.py SWEEP [--out FIG] [--extra LABEL=REPORT ...]
    # FIG defaults to SWEEP/report/equal-evaluations
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["run_points", "sweep_points", "study_points", "draw"]


def _raw_entry(report: dict) -> dict:
    """The raw generator's metrics in a run's analyze report (not its AIS-refined samples)."""
    for name, entry in report["models"].items():
        if "+AIS" not in name and "refined" not in name:
            return entry
    raise SystemExit("a run report without a raw generator's metrics")


def _points(entry: dict, log: Path) -> dict:
    """{final: (evaluations, ess), curve: [(evaluations, flow ESS), ...]} from a run's metrics
    (`entry`: the keys of `bgp4 analyze`'s metrics.json) and its training log (may be missing)."""
    frames = entry.get("train_md_frames") or 0
    md_evals = entry.get("train_md_frames_energy_evaluations") or 0
    per_frame = md_evals / frames if frames else 0.0
    final = (md_evals + (entry.get("train_energy_evaluations") or 0), entry.get("reverse_ess"))
    curve = []
    for line in log.read_text().splitlines() if log.is_file() else []:
        row = json.loads(line)
        ess = row.get("flow_ess", row.get("batch_ess"))  # fab logs flow_ess; kl and mixed batch_ess
        if ess is not None:
            curve.append((per_frame * (row.get("md_frames") or 0) + (row.get("energy_evaluations") or 0), ess))
    return {"final": final, "curve": curve}


def run_points(run: Path, report: Path | None = None) -> dict:
    """`_points` of one run, from its report (default: RUN/report, a sweep run's own) and its
    training log (RUN/metrics.jsonl, or REPORT/../training-metrics.jsonl where the run is gone)."""
    report = report or run / "report"
    log = run / "metrics.jsonl"
    if not log.is_file():
        log = report.parent / "training-metrics.jsonl"
    return _points(_raw_entry(json.loads((report / "metrics.json").read_text())), log)


def study_points(report: Path) -> dict[str, dict[int, dict]]:
    """{objective: {seed: points}} from a kept sweep report: its metrics.json (per-seed values of
    every model, named MODEL-OBJECTIVE) and the training logs beside it (MODEL-OBJECTIVE-sSEED-metrics.jsonl)."""
    metrics = json.loads((report / "metrics.json").read_text())["metrics"]
    keys = ("reverse_ess", "train_md_frames", "train_md_frames_energy_evaluations", "train_energy_evaluations")
    out: dict[str, dict[int, dict]] = {}
    for model, values in metrics["reverse_ess"]["models"].items():
        for seed in values["values"]:
            entry = {k: metrics[k]["models"][model]["values"].get(seed) for k in keys}
            out.setdefault(model.rsplit("-", 1)[1], {})[int(seed)] = _points(
                entry, report / f"{model}-s{seed}-metrics.jsonl"
            )
    return out


def sweep_points(sweep: Path) -> dict[str, dict[int, dict]]:
    """{objective: {seed: run_points}} of every finished run of a sweep over objectives."""
    spec = json.loads((sweep / "sweep.json").read_text())
    runs = spec.get("runs") or {}
    if not isinstance(runs, dict):
        raise SystemExit(f"{sweep}: not a sweep over objectives (bgp4 sweep --objectives ml,mixed,kl,fab)")
    out: dict[str, dict[int, dict]] = {}
    for name, info in runs.items():
        if (sweep / "runs" / name / "report" / "metrics.json").is_file():
            out.setdefault(info["objective"], {})[int(info["seed"])] = run_points(sweep / "runs" / name)
    return out


def draw(points: dict[str, dict[int, dict]], stem: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for i, (objective, seeds) in enumerate(sorted(points.items())):
        colour = f"C{i}"
        for j, (_, run) in enumerate(sorted(seeds.items())):
            if run["curve"]:
                x, y = zip(*run["curve"])
                ax.plot(x, y, color=colour, alpha=0.5, lw=1)
            x, y = run["final"]
            ax.plot([x], [y], "o", color=colour, label=objective if j == 0 else None)
    ax.set_xscale("log")
    ax.set_xlabel("target energy evaluations (MD frames counted by their MD steps)")
    ax.set_ylabel("reverse ESS")
    ax.set_ylim(0, 1)
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_title("dots: end of training; lines: ESS of the flow's own samples while training", fontsize=9)
    ax.legend(title="objective", loc="upper left", fontsize=8)
    fig.tight_layout()
    for suffix in (".png", ".pdf"):
        fig.savefig(stem.with_suffix(suffix), dpi=150)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--out", type=Path, help="figure stem (default SWEEP/report/equal-evaluations)")
    parser.add_argument("--extra", action="append", default=[], help="LABEL=REPORT: a run outside the sweep")
    args = parser.parse_args()
    has_runs = (args.sweep / "sweep.json").is_file() and (args.sweep / "runs").is_dir()
    points = sweep_points(args.sweep) if has_runs else {}
    if not points and (args.sweep / "report" / "metrics.json").is_file():  # a kept report, its runs gone
        points = study_points(args.sweep / "report")
    for extra in args.extra:
        label, _, report = extra.partition("=")
        entry = _raw_entry(json.loads((Path(report) / "metrics.json").read_text()))
        points.setdefault(label, {})[0] = run_points(Path(entry["run"]), Path(report))
    if not points:
        raise SystemExit(f"{args.sweep}: no finished run with a report")
    for objective, seeds in sorted(points.items()):
        for seed, run in sorted(seeds.items()):
            evals, ess = run["final"]
            print(f"{objective} seed {seed}: {evals:.3g} evaluations, reverse ESS {ess:.3f}")
    stem = args.out or args.sweep / "report" / "equal-evaluations"
    stem.parent.mkdir(parents=True, exist_ok=True)
    draw(points, stem)
    print(f"figure: {stem.with_suffix('.png')}")


if __name__ == "__main__":
    main()
