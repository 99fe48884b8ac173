"""run/scripts/paired_sweeps.py: two sweeps paired seed by seed, from their directories or reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _scripts import load_script


def _script():
    return load_script("run/scripts/paired_sweeps.py")


def _report(path: Path, values: dict[int, float]) -> Path:
    """A sweep report's metrics.json with one metric, reverse_ess, of model 'spline' per seed."""
    entry = {"mean": sum(values.values()) / len(values), "values": {str(k): v for k, v in values.items()}}
    path.write_text(json.dumps({"metrics": {"reverse_ess": {"models": {"spline": entry}}}}))
    return path


def test_reports_pair_seed_by_seed_over_the_seeds_both_have(tmp_path):
    first = _report(tmp_path / "a.json", {0: 0.30, 1: 0.40, 2: 0.50})
    second = _report(tmp_path / "b.json", {0: 0.35, 1: 0.46, 3: 0.90})  # seed 3 has no partner
    entry = _script().compare(first, second, ["reverse_ess", "test_nll"])["spline"]
    assert list(entry) == ["reverse_ess"]  # a metric neither report has is left out
    assert entry["reverse_ess"]["seeds"] == [0, 1]
    assert entry["reverse_ess"]["paired"]["mean"] == pytest.approx(0.055)


def test_a_study_that_kept_only_its_reports_can_still_be_paired():
    study = Path(__file__).resolve().parents[1] / "run" / "results" / "benchmark-300K"
    result = _script().compare(
        study / "fab2048" / "report" / "metrics.json",
        study / "fab2048-x2" / "report" / "metrics.json",
        ["reverse_ess_clipped"],
    )
    assert result["spline +AIS(20)"]["reverse_ess_clipped"]["paired"]["mean"] == pytest.approx(0.0491, abs=5e-4)
