"""run/scripts/equal_evaluations.py: ESS against energy evaluations, MD frames counted by their steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "run" / "scripts" / "equal_evaluations.py"


def _run(root: Path, name: str, ess: float, frames: int, energy: int, curve: list[tuple[int, int, float]]) -> None:
    run = root / "runs" / name
    (run / "report").mkdir(parents=True)
    entry = {
        "reverse_ess": ess,
        "train_md_frames": frames,
        "train_md_frames_energy_evaluations": 10 * frames,
        "train_energy_evaluations": energy,
    }
    report = {"models": {"spline": entry, "spline +AIS(20)": {**entry, "reverse_ess": 0.99}}}
    (run / "report" / "metrics.json").write_text(json.dumps(report))
    rows = [{"step": 0, "test_nll": -1.0, "md_frames": frames, "energy_evaluations": 0}]
    rows += [{"flow_ess": e, "md_frames": f, "energy_evaluations": n} for f, n, e in curve]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


@pytest.mark.slow
def test_points_count_md_frames_by_their_steps_and_draw(tmp_path):
    runs = {
        "spline-ml-s0": {"model": "spline-ml", "kind": "spline", "objective": "ml", "seed": 0},
        "spline-fab-s0": {"model": "spline-fab", "kind": "spline", "objective": "fab", "seed": 0},
        "spline-fab-s1": {"model": "spline-fab", "kind": "spline", "objective": "fab", "seed": 1},
    }
    (tmp_path / "sweep.json").write_text(json.dumps({"runs": runs}))
    _run(tmp_path, "spline-ml-s0", 0.5, 1000, 0, [])
    _run(tmp_path, "spline-fab-s0", 0.7, 1000, 5000, [(1000, 2000, 0.6), (1000, 5000, 0.7)])
    # spline-fab-s1 has not finished: no report, left out
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ml seed 0: 1e+04 evaluations, reverse ESS 0.500" in done.stdout
    assert "fab seed 0: 1.5e+04 evaluations, reverse ESS 0.700" in done.stdout
    assert "seed 1" not in done.stdout
    assert (tmp_path / "report" / "equal-evaluations.png").stat().st_size > 0

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from equal_evaluations import sweep_points
    finally:
        sys.path.remove(str(SCRIPT.parent))
    points = sweep_points(tmp_path)
    assert points["fab"][0]["curve"] == [(12000.0, 0.6), (15000.0, 0.7)]
    assert points["ml"][0]["final"] == (10000, 0.5)


@pytest.mark.slow
def test_a_run_outside_the_sweep_joins_by_its_report(tmp_path):
    (tmp_path / "sweep.json").write_text(json.dumps({"runs": {}}))
    _run(tmp_path / "elsewhere", "scratch", 0.4, 0, 3000, [(0, 1000, 0.2), (0, 3000, 0.4)])
    run = tmp_path / "elsewhere" / "runs" / "scratch"
    report = tmp_path / "scratch-report"
    report.mkdir()
    entry = json.loads((run / "report" / "metrics.json").read_text())["models"]["spline"]
    (report / "metrics.json").write_text(json.dumps({"models": {"fab-scratch": {**entry, "run": str(run)}}}))
    args = [sys.executable, str(SCRIPT), str(tmp_path), "--extra", f"fab from scratch={report}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "fab from scratch seed 0: 3e+03 evaluations, reverse ESS 0.400" in done.stdout
    assert (tmp_path / "report" / "equal-evaluations.png").stat().st_size > 0


def test_a_kept_report_gives_the_points_with_batch_ess_curves(tmp_path):
    """A study keeps a sweep's report (per-seed values in metrics.json) and its runs' logs beside it;
    kl and mixed runs log the ESS of their flow batches as batch_ess, drawn like FAB's flow_ess."""
    report = tmp_path / "report"
    report.mkdir()
    values = {"reverse_ess": 0.3, "train_md_frames": 100, "train_md_frames_energy_evaluations": 2500}
    metrics = {
        key: {"models": {"spline-kl": {"values": {"0": value}}, "spline-ml": {"values": {"0": value}}}}
        for key, value in values.items()
    }
    metrics["train_energy_evaluations"] = {
        "models": {"spline-kl": {"values": {"0": 512}}, "spline-ml": {"values": {"0": 0}}}
    }
    (report / "metrics.json").write_text(json.dumps({"metrics": metrics}))
    rows = [{"md_frames": 100, "energy_evaluations": n, "batch_ess": e} for n, e in ((256, 0.2), (512, 0.25))]
    (report / "spline-kl-s0-metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from equal_evaluations import study_points
    finally:
        sys.path.remove(str(SCRIPT.parent))
    points = study_points(report)
    assert points["kl"][0] == {"final": (2500 + 512, 0.3), "curve": [(2756.0, 0.2), (3012.0, 0.25)]}
    assert points["ml"][0] == {"final": (2500, 0.3), "curve": []}  # no log kept: the point alone
