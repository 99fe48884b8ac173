"""bgp4's rows beside the field's published table (reverse ESS at 300 K, implicit solvent).

The published rows are von Klitzing et al. 2025 ("constrained mass transport", table 1), whose
lineage is FAB (Midgley et al. 2023) and TA-BG (Schopmans and Friederich 2025): reverse ESS with
the largest 1e-4 of the log weights clipped before the Kish formula, Ramachandran TV for alanine
dipeptide. bgp4's rows come from `bgp4 sweep` reports (one per molecule, every model over its
seeds, with 95 % Student-t intervals), on the metrics `bgp4 analyze` computes the table's way.

    python run/scripts/benchmark_table.py --dipeptide SWEEP [--dipeptide SWEEP ...] [--tetrapeptide SWEEP ...] [--out F]

SWEEP is a sweep directory or its `report/` folder; give a molecule several (for example a
likelihood sweep and a `bgp4 sweep --init` FAB sweep after it). A likelihood row names its step
count ("spline (ml, 250 steps)"). A row whose runs trained with another objective names it, its
batch and its energy steps, counted along the `--init` chain where the runs it started from
trained with the energy too, and the likelihood steps of the run the chain starts from ("spline
(fab, batch 2048, 600 + 600 steps, after 250 ml steps)"; FAB's batch sets its
gradient noise, see run/results/benchmark-300K/fab.md). Prints a Markdown table; `--out` writes it too.
MD frames count as evaluations, as in the table: the data file's MD steps (equilibration and every
replica-exchange temperature included) are a column of their own.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["PUBLISHED", "PUBLISHED_TV", "bgp4_rows", "render"]

#: Published reverse ESS (%), 300 K: {method: (alanine dipeptide, tetrapeptide)}.
PUBLISHED: dict[str, tuple[float, float]] = {
    "maximum likelihood": (82.1, 45.3),
    "reverse KL": (94.1, 75.1),
    "FAB": (94.8, 63.6),
    "TA-BG": (95.8, 65.8),
    "CMT": (97.7, 68.6),
}
#: Published Ramachandran TV of alanine dipeptide.
PUBLISHED_TV: dict[str, float] = {"maximum likelihood": 1.09e-2, "CMT": 9.4e-3}
#: Under the published table: its systems (run/results/benchmark-300K, "Differences of setup").
PUBLISHED_SYSTEM = (
    "Their alanine dipeptide is Amber ff96 with OBC1 (openmmtools' `AlanineDipeptideImplicit`, no constraints; "
    "`bgp4 simulate --forcefield amber96`); bgp4's rows are on the force field of their data file "
    "(the default amber99sb-ildn with OBC2 is another Hamiltonian). Their tetrapeptide, if built by TA-BG's "
    "released code, is bgp4's default system with its X-H bonds held (98 flow dims, `--constraints hbonds`); "
    "rows on data with `--constraints none` free them (120)."
)

#: (metric key in the sweep report, column header, format)
COLUMNS = (
    ("reverse_ess_clipped", "reverse ESS, clipped (%)", "pct"),
    ("reverse_ess", "reverse ESS (%)", "pct"),
    ("forward_ess", "forward ESS (%)", "pct"),
    ("ramachandran_tv", "Ramachandran TV", "sci"),
    ("energy_evals_per_sample", "evaluations per sample", "num"),
    ("train_energy_evaluations", "training evaluations", "sci"),
    ("md_energy_evaluations", "MD evaluations (data file)", "sci"),
)


def _chain(init: str | None, steps: list[int]) -> tuple[list[int], int | None]:
    """`steps` preceded by the energy steps of the runs an `--init` chain started from (while they
    trained with the energy and their settings.json can be read), and the likelihood steps of the
    run the chain starts from (None where its settings.json cannot be read)."""
    settings = Path(init) / "settings.json" if init else None
    if settings is None or not settings.is_file():
        return steps, None
    run = json.loads(settings.read_text())
    if run.get("objective", "ml") in ("ml", "mixed") or not run.get("energy_steps"):
        return steps, run.get("steps")
    return _chain(run.get("init"), [int(run["energy_steps"]), *steps])


def _train(report: Path) -> dict:
    """The train settings of a sweep's runs, from its sweep.json beside the report ({} if unknown),
    with `energy_steps_chain`: the energy steps of each stage, first run of the sweep's chain first."""
    for candidate in (report.parent / "sweep.json", report.parent.parent / "sweep.json"):
        if candidate.is_file():
            sweep = json.loads(candidate.read_text())
            train = dict(sweep.get("train", {}))
            init = next(iter(sweep.get("runs", {}).values()), {}).get("init")
            if train.get("energy_steps"):
                train["energy_steps_chain"], train["ml_steps"] = _chain(init, [int(train["energy_steps"])])
            return train
    return {}


def _load(path: Path) -> dict:
    for candidate in (path / "report" / "metrics.json", path / "metrics.json", path):
        if candidate.is_file():
            summary = json.loads(candidate.read_text())
            if "metrics" in summary and "models" in summary:
                return {**summary, "train": _train(candidate)}
    raise SystemExit(f"{path}: no sweep report (report/metrics.json from `bgp4 sweep`)")


def _cell(stats: dict | None, kind: str) -> str:
    if not stats or stats.get("mean") is None:
        return "-"
    scale = 100.0 if kind == "pct" else 1.0
    fmt = {"pct": "{:.1f}", "sci": "{:.3g}", "num": "{:.1f}"}[kind]
    text = fmt.format(stats["mean"] * scale)
    if stats.get("low") is not None and stats["low"] != stats["high"]:  # a constant has no interval
        text += f" [{fmt.format(stats['low'] * scale)}, {fmt.format(stats['high'] * scale)}]"
    return text


def _ml_recipe(train: dict) -> str:
    """The label of a likelihood sweep ("ml, 3000 steps, weight decay 3, best test NLL"):
    its steps, its weight decay (if any) and whether it kept the weights of its best test NLL."""
    parts = ["ml", f"{train['steps']} steps"]
    if train.get("weight_decay"):
        parts.append(f"weight decay {train['weight_decay']:g}")
    if train.get("keep_best"):
        parts.append("best test NLL")
    return ", ".join(parts)


def bgp4_rows(summary: dict) -> list[tuple[str, list[str], int]]:
    """(row label, cells in COLUMNS order, seeds) for every model of a sweep report; the label is
    the model, with the sweep's objective, batch and energy steps in brackets when it is not
    maximum likelihood, and its likelihood steps when it is."""
    train = summary.get("train", {})
    objective = str(train.get("objective") or "ml")
    trained = objective if train.get("batch") is None else f"{objective}, batch {train['batch']}"
    if train.get("energy_steps_chain"):
        trained += ", " + " + ".join(str(n) for n in train["energy_steps_chain"]) + " steps"
    if train.get("ml_steps") is not None:  # FAB after 250 or after 10,000 likelihood steps read apart
        trained += f", after {train['ml_steps']} ml steps"
    rows = []
    for model in summary["models"]:
        cells, seeds = [], 0
        for key, _, kind in COLUMNS:
            stats = summary["metrics"].get(key, {}).get("models", {}).get(model)
            seeds = max(seeds, (stats or {}).get("n", 0))
            cells.append(_cell(stats, kind))
        if "objective" not in train or f"-{objective}" in model:  # unknown, or an objectives axis names them
            label = model
        elif objective == "ml":  # likelihood sweeps differ by their step count, regularization (and their data)
            label = model if train.get("steps") is None else f"{model} ({_ml_recipe(train)})"
        else:
            label = f"{model} ({trained})"
        rows.append((label, cells, seeds))
    return rows


def render(sweeps: dict[str, list[dict]]) -> str:
    """Markdown: the published table, then bgp4's rows per molecule (from one or more sweep reports)."""
    lines = [
        "| reverse ESS, 300 K (published) | alanine dipeptide | alanine tetrapeptide | Ramachandran TV (dipeptide) |",
        "|---|---|---|---|",
    ]
    for method, (di, tetra) in PUBLISHED.items():
        tv = PUBLISHED_TV.get(method)
        lines.append(f"| {method} | {di:.1f} % | {tetra:.1f} % | {'-' if tv is None else f'{tv:.3g}'} |")
    lines += ["", PUBLISHED_SYSTEM]
    for molecule, summaries in sweeps.items():
        files = sorted({Path(s["train"]["data"]).name for s in summaries if s.get("train", {}).get("data")})
        on = f"; data: {', '.join(files)}" if files else ""
        lines += ["", f"bgp4, {molecule} (mean over seeds [95 % interval]{on}):", ""]
        lines.append("| model | seeds | " + " | ".join(header for _, header, _ in COLUMNS) + " |")
        lines.append("|---|---|" + "---|" * len(COLUMNS))
        for summary in summaries:
            for label, cells, seeds in bgp4_rows(summary):
                lines.append(f"| {label} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dipeptide", type=Path, action="append", help="sweep on alanine dipeptide, 300 K (repeatable)"
    )
    parser.add_argument(
        "--tetrapeptide",
        type=Path,
        action="append",
        help="sweep on alanine tetrapeptide, 300 K (repeatable)",
    )
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    args = parser.parse_args()
    sweeps = {
        name: [_load(path) for path in paths]
        for name, paths in (("alanine dipeptide", args.dipeptide), ("alanine tetrapeptide", args.tetrapeptide))
        if paths
    }
    if not sweeps:
        parser.error("give --dipeptide and/or --tetrapeptide")
    table = render(sweeps)
    print(table, end="")
    if args.out is not None:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
