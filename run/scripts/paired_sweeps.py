"""Paired comparison of two sweeps run on the same data and seeds (one setting changed between them).

A sweep compares its models against each other; a setting that is not a sweep axis (here
`--zmatrix hand` against `--zmatrix auto`) is compared by running the sweep twice, with the same
seeds, and pairing the runs seed by seed. Prints, per model and metric, both means with their 95 %
Student-t intervals and the paired difference (second minus first) with its interval and p.

    python run/scripts/paired_sweeps.py SWEEP_A SWEEP_B [--metrics reverse_ess,test_nll_end] [--json OUT]

Each of SWEEP_A and SWEEP_B is a sweep directory or the `metrics.json` of a sweep's report, which
keeps every seed's value: a study folder that kept only the report can still be paired.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bgp4.report.aggregate import collect
from bgp4.report.seeds import paired_difference, t_interval

__all__ = ["per_seed", "compare", "main"]

_METRICS = ("reverse_ess", "log10_reverse_ess", "ramachandran_tv", "ramachandran_tv_reweighted")
DEFAULT_METRICS = ",".join(_METRICS + ("dF_phi_reweighted_kT", "test_nll"))


def per_seed(source: Path) -> dict[str, dict[int, dict]]:
    """{model: {seed: {"values": {metric: value}}}} of a sweep directory or of its report's metrics.json."""
    if source.is_dir():
        return collect(source)[1]
    report = json.loads(source.read_text())
    runs: dict[str, dict[int, dict]] = {}
    for key, metric in report["metrics"].items():
        for model, entry in metric["models"].items():
            for seed, value in entry.get("values", {}).items():
                runs.setdefault(model, {}).setdefault(int(seed), {"values": {}})["values"][key] = value
    return runs


def compare(first: Path, second: Path, metrics: list[str]) -> dict:
    """{model: {metric: {first, second, paired}}} over the seeds both sweeps finished."""
    runs_a, runs_b = per_seed(first), per_seed(second)
    out: dict = {}
    for model in sorted(set(runs_a) & set(runs_b)):
        seeds = sorted(set(runs_a[model]) & set(runs_b[model]))
        for key in metrics:
            a = [runs_a[model][s]["values"].get(key) for s in seeds]
            b = [runs_b[model][s]["values"].get(key) for s in seeds]
            if all(v is None for v in a + b):
                continue
            out.setdefault(model, {})[key] = {
                "seeds": seeds,
                "first": {**t_interval(a), "values": a},
                "second": {**t_interval(b), "values": b},
                "paired": paired_difference(b, a),
            }
    return out


def _show(entry: dict) -> str:
    if entry["mean"] is None:
        return "-"
    if entry["low"] is None:
        return f"{entry['mean']:.4g}"
    return f"{entry['mean']:.4g} [{entry['low']:.4g}, {entry['high']:.4g}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("first", type=Path, help="the reference sweep directory (or its report's metrics.json)")
    parser.add_argument("second", type=Path, help="the sweep with the changed setting (or its report's metrics.json)")
    parser.add_argument("--metrics", default=DEFAULT_METRICS, help="comma-separated metric keys of the sweep report")
    parser.add_argument("--json", type=Path, help="also write the comparison as JSON")
    args = parser.parse_args()
    result = compare(args.first, args.second, args.metrics.split(","))
    print(f"first: {args.first}\nsecond: {args.second}")
    print("| model | metric | first | second | second - first | p |\n|---|---|---|---|---|---|")
    for model, per_metric in result.items():
        for key, e in per_metric.items():
            p = e["paired"].get("p")
            print(
                f"| {model} | {key} | {_show(e['first'])} | {_show(e['second'])} | {_show(e['paired'])} "
                f"| {'-' if p is None else f'{p:.3g}'} |"
            )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
