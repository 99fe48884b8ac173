"""Sweep reports: statistics over seeds (t intervals, paired differences), significance, refined variants."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bgp4.errors import InputError
from bgp4.report import aggregate
from bgp4.report.aggregate import _interval, collect, render, summarize_sweep
from bgp4.report.seeds import paired_difference, t_interval

# --------------------------------------------------------------------------- statistics


def test_t_interval_covers_the_true_mean_at_its_level():
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(2000):
        e = t_interval(list(rng.normal(3.0, 2.0, size=4)))
        covered += e["low"] <= 3.0 <= e["high"]
    assert 0.93 < covered / 2000 < 0.97
    single = t_interval([1.5, None, float("nan")])
    assert single["mean"] == 1.5 and single["low"] is None and single["n"] == 1


def test_intervals_wider_than_100_format_without_decimals():
    """A large value with a wide interval (seconds of training over seeds) prints whole numbers; it
    once asked for negative decimals and the sweep report failed."""
    assert _interval({"mean": 12345.6, "low": 12211.2, "high": 12480.4, "n": 3}) == "12346 [12211, 12480]"
    assert _interval({"mean": -146.723, "low": -146.81, "high": -146.64, "n": 3}) == "-146.72 [-146.81, -146.64]"


def test_paired_difference_removes_the_shared_seed_effect():
    rng = np.random.default_rng(1)
    seed_effect = rng.normal(0.0, 10.0, size=6)  # large spread shared by both models
    a = seed_effect + rng.normal(0.0, 0.1, size=6)
    b = a + 1.0 + rng.normal(0.0, 0.1, size=6)
    paired = paired_difference(list(b), list(a))
    unpaired_a = t_interval(list(a))
    assert paired["low"] < 1.0 < paired["high"] and paired["high"] - paired["low"] < 1.0
    assert paired["p"] < 1e-3
    assert (unpaired_a["high"] - unpaired_a["low"]) > 10 * (paired["high"] - paired["low"])
    assert paired_difference([1.0, 2.0], [1.0, 2.0])["p"] is None  # identical: no test


def test_report_says_which_differences_are_significant():
    jitter = {"rnvp": [0.0, 0.02, -0.01, 0.03], "p4inv": [0.01, -0.02, 0.0, 0.02]}
    runs = {
        m: {
            s: {"values": {"energy_shift_kT": base + 0.1 * s + jitter[m][s], "reverse_ess": 0.1 + 0.05 * ((s * 7) % 3)}}
            for s in range(4)
        }
        for m, base in (("rnvp", 1.0), ("p4inv", 0.5))
    }
    summary = summarize_sweep(["rnvp", "p4inv"], runs)
    assert list(summary) == ["energy_shift_kT", "reverse_ess"]  # known metrics in display order
    shift = summary["energy_shift_kT"]
    assert shift["models"]["rnvp"]["values"] == {str(s): 1.0 + 0.1 * s + jitter["rnvp"][s] for s in range(4)}
    assert shift["paired"]["p4inv"]["mean"] == pytest.approx(-0.5 + np.mean(jitter["p4inv"]) - np.mean(jitter["rnvp"]))
    text = render({"data": "d.h5", "models": ["rnvp", "p4inv"], "seeds": [0, 1, 2, 3]}, summary)
    assert "lower energy shift vs MD" in text and "reverse ESS" in text.split("Not distinguishable")[1]


def test_refined_samples_are_a_variant_of_their_run_in_the_report(tmp_path):
    entry = {"reverse_ess": 0.5, "mean_energy_kT": -3.0}
    runs = {f"spline-s{s}": {"model": "spline", "kind": "spline", "objective": "ml", "seed": s} for s in (0, 1)}
    record = {"data": "d.h5", "models": ["spline", "rnvp"], "seeds": [0, 1], "runs": runs}
    (tmp_path / "sweep.json").write_text(json.dumps(record))
    for seed in (0, 1):
        report = tmp_path / "runs" / f"spline-s{seed}" / "report"
        report.mkdir(parents=True)
        models = {"spline": entry, "spline +AIS(5)": {**entry, "reverse_ess": 0.9 + seed / 100}}
        (report / "metrics.json").write_text(
            json.dumps({"models": models, "kT_kJ_per_mol": 4.99, "low_energy_threshold_kT": 10.0})
        )
    record, collected = collect(tmp_path)
    assert record["models"] == ["spline", "spline +AIS(5)", "rnvp"]
    assert [collected["spline +AIS(5)"][s]["values"]["reverse_ess"] for s in (0, 1)] == [0.9, 0.91]
    assert collected["spline +AIS(5)"][0]["samples"].name == "samples-refined.h5"
    assert collected["spline"][1]["samples"].name == "samples.h5" and collected["rnvp"] == {}
    summary = summarize_sweep(record["models"], collected)
    assert summary["reverse_ess"]["models"]["spline +AIS(5)"]["mean"] == pytest.approx(0.905)
    assert summary["reverse_ess"]["paired"]["spline +AIS(5)"]["n"] == 2


def test_the_sweep_report_analyzes_again_the_runs_on_another_grid(tmp_path, monkeypatch):
    import bgp4.report.analyze as stage

    runs = {f"spline-s{s}": {"model": "spline", "kind": "spline", "objective": "ml", "seed": s} for s in (0, 1, 2)}
    (tmp_path / "sweep.json").write_text(
        json.dumps(
            {"data": "d.h5", "models": ["spline"], "seeds": [0, 1, 2], "runs": runs, "train": {"temperature": 300.0}}
        )
    )
    for seed, grid in ((0, None), (1, 64), (2, 100)):  # seed 0's report predates the recorded grid: 64
        report = tmp_path / "runs" / f"spline-s{seed}" / "report"
        report.mkdir(parents=True)
        (report.parent / "samples.h5").touch()
        metrics = {"models": {"spline": {"reverse_ess": 0.5}}, "kT_kJ_per_mol": 2.49, "low_energy_threshold_kT": 1.0}
        (report / "metrics.json").write_text(
            json.dumps(metrics if grid is None else {**metrics, "ramachandran_bins": grid})
        )
    calls = []

    def analyze(data, runs, out, **kw):  # writes the report on the grid asked
        assert kw["temperature"] == 300.0  # the sweep's --temperature, for data files that record none
        calls.append((runs[0].name, kw["rama_bins"]))
        (out / "metrics.json").write_text(json.dumps({**metrics, "ramachandran_bins": kw["rama_bins"]}))

    monkeypatch.setattr(stage, "analyze", analyze)
    monkeypatch.setattr(aggregate, "_draw", lambda jobs, executor: {name: [] for name in jobs})
    assert aggregate.write_sweep_report(tmp_path, rama_bins=100)["ramachandran_bins"] == 100
    assert calls == [("spline-s0", 100), ("spline-s1", 100)]  # seed 2 is on the asked grid already
    assert "on 100 x 100 bins" in (tmp_path / "report" / "report.md").read_text()
    calls.clear()
    aggregate.write_sweep_report(tmp_path)  # as `bgp4 sweep` calls it: the grid of the last report
    assert calls == [] and aggregate.sweep_grid(tmp_path) == 100
    aggregate.write_sweep_report(tmp_path, rama_bins=64)
    assert calls == [(f"spline-s{s}", 64) for s in (0, 1, 2)]
    (tmp_path / "runs" / "spline-s2" / "samples.h5").unlink()  # a report that cannot be made again
    with pytest.raises(InputError, match="spline-s2 have reports on another Ramachandran grid"):
        aggregate.write_sweep_report(tmp_path, rama_bins=100)


def test_a_sweep_without_analyzed_runs_has_no_report(tmp_path):
    runs = {"spline-s0": {"model": "spline", "kind": "spline", "objective": "ml", "seed": 0}}
    (tmp_path / "sweep.json").write_text(json.dumps({"data": "d.h5", "models": ["spline"], "seeds": [0], "runs": runs}))
    with pytest.raises(InputError, match="no run of .* has been analyzed yet"):
        aggregate.write_sweep_report(tmp_path)
    assert not (tmp_path / "report").exists()
