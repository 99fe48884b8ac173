"""run/scripts/benchmark_table.py: bgp4's sweep rows beside the published 300 K table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "run" / "scripts" / "benchmark_table.py"


def _summary() -> dict:
    def stats(mean, low, high, n=3):
        return {"mean": mean, "low": low, "high": high, "n": n}

    return {
        "models": ["spline", "spline +AIS(20)"],
        "metrics": {
            "reverse_ess_clipped": {
                "models": {"spline": stats(0.8, 0.75, 0.85), "spline +AIS(20)": stats(0.97, 0.96, 0.98)}
            },
            "reverse_ess": {"models": {"spline": stats(0.79, 0.74, 0.84)}},
            "ramachandran_tv": {"models": {"spline": stats(0.011, 0.01, 0.012)}},
            "energy_evals_per_sample": {"models": {"spline": stats(1.0, None, None, 1)}},
        },
    }


def test_table_lists_published_rows_and_each_sweep_model(tmp_path):
    sweep = tmp_path / "sweep" / "report"
    sweep.mkdir(parents=True)
    (sweep / "metrics.json").write_text(json.dumps(_summary()))
    out = tmp_path / "table.md"
    args = [sys.executable, str(SCRIPT), "--dipeptide", str(sweep.parent), "--out", str(out)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    table = out.read_text()
    assert table == done.stdout
    assert "| maximum likelihood | 82.1 % | 45.3 % | 0.0109 |" in table
    assert "| CMT | 97.7 % | 68.6 % | 0.0094 |" in table
    assert "Amber ff96 with OBC1" in table  # the published dipeptide's system, which bgp4's default is not
    assert "| spline | 3 | 80.0 [75.0, 85.0] | 79.0 [74.0, 84.0] | - | 0.011 [0.01, 0.012] | 1.0 | - | - |" in table
    assert "| spline +AIS(20) | 3 | 97.0 [96.0, 98.0] |" in table


def test_a_second_sweep_of_one_molecule_names_its_objective(tmp_path):
    """A likelihood sweep and a FAB sweep after it: both give rows; the FAB rows say so, with their batch."""
    dirs = []
    for name, objective in (("ml", "ml"), ("fab", "fab")):
        (tmp_path / name / "report").mkdir(parents=True)
        (tmp_path / name / "report" / "metrics.json").write_text(json.dumps(_summary()))
        (tmp_path / name / "sweep.json").write_text(json.dumps({"train": {"objective": objective, "batch": 2048}}))
        dirs += ["--dipeptide", str(tmp_path / name)]
    done = subprocess.run([sys.executable, str(SCRIPT), *dirs], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = [line.split(" | ")[0] for line in done.stdout.splitlines() if line.startswith("| spline")]
    fab = "(fab, batch 2048)"
    assert rows == ["| spline", "| spline +AIS(20)", f"| spline {fab}", f"| spline +AIS(20) {fab}"]


def test_likelihood_sweeps_of_one_molecule_name_their_step_counts(tmp_path):
    """Two likelihood sweeps (say on 50,000 and on 500,000 frames) give rows that say which is which."""
    dirs = []
    for steps in (250, 10000):
        (tmp_path / str(steps) / "report").mkdir(parents=True)
        (tmp_path / str(steps) / "report" / "metrics.json").write_text(json.dumps(_summary()))
        train = {"objective": "ml", "steps": steps, "data": f"/data/ala2-{steps}.h5"}
        (tmp_path / str(steps) / "sweep.json").write_text(json.dumps({"train": train}))
        dirs += ["--dipeptide", str(tmp_path / str(steps))]
    done = subprocess.run([sys.executable, str(SCRIPT), *dirs], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = [line.split(" | ")[0] for line in done.stdout.splitlines() if line.startswith("| spline")]
    assert rows == [
        "| spline (ml, 250 steps)",
        "| spline +AIS(20) (ml, 250 steps)",
        "| spline (ml, 10000 steps)",
        "| spline +AIS(20) (ml, 10000 steps)",
    ]
    # the heading names the data files (another constraint setting is another file, another target)
    assert "alanine dipeptide (mean over seeds [95 % interval]; data: ala2-10000.h5, ala2-250.h5):" in done.stdout


def test_a_likelihood_row_names_its_weight_decay_and_best_weights(tmp_path):
    """The tetrapeptide's dense rows (weight decay, best test NLL kept) read apart from a plain sweep."""
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "metrics.json").write_text(json.dumps(_summary()))
    train = {"objective": "ml", "steps": 3000, "weight_decay": 3.0, "keep_best": True}
    (tmp_path / "sweep.json").write_text(json.dumps({"train": train}))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tetrapeptide", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "| spline (ml, 3000 steps, weight decay 3, best test NLL) | 3 |" in done.stdout


def test_a_fab_sweep_after_a_fab_sweep_counts_the_energy_steps_of_the_chain(tmp_path):
    """`bgp4 sweep --init` from a FAB sweep: the label gives each stage's energy steps, first stage first."""
    first = tmp_path / "first-run"
    first.mkdir()
    (first / "settings.json").write_text(json.dumps({"objective": "fab", "energy_steps": 600, "init": "/gone/ml"}))
    (tmp_path / "more" / "report").mkdir(parents=True)
    (tmp_path / "more" / "report" / "metrics.json").write_text(json.dumps(_summary()))
    train = {"objective": "fab", "batch": 2048, "energy_steps": 400}
    sweep = {"train": train, "runs": {"spline-s0": {"init": str(first)}}}
    (tmp_path / "more" / "sweep.json").write_text(json.dumps(sweep))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dipeptide", str(tmp_path / "more")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "| spline (fab, batch 2048, 600 + 400 steps) | 3 |" in done.stdout


def test_a_fab_sweep_names_the_likelihood_steps_it_started_from(tmp_path):
    """FAB after a 250-step and after a 10,000-step likelihood sweep: the rows say which."""
    dirs = []
    for ml_steps in (250, 10000):
        ml_run = tmp_path / f"ml{ml_steps}" / "runs" / "spline-s0"
        ml_run.mkdir(parents=True)
        (ml_run / "settings.json").write_text(json.dumps({"objective": "ml", "steps": ml_steps, "energy_steps": 0}))
        fab = tmp_path / f"fab{ml_steps}"
        (fab / "report").mkdir(parents=True)
        (fab / "report" / "metrics.json").write_text(json.dumps(_summary()))
        train = {"objective": "fab", "batch": 2048, "energy_steps": 600}
        (fab / "sweep.json").write_text(json.dumps({"train": train, "runs": {"spline-s0": {"init": str(ml_run)}}}))
        dirs += ["--dipeptide", str(fab)]
    done = subprocess.run([sys.executable, str(SCRIPT), *dirs], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "| spline (fab, batch 2048, 600 steps, after 250 ml steps) | 3 |" in done.stdout
    assert "| spline (fab, batch 2048, 600 steps, after 10000 ml steps) | 3 |" in done.stdout


def test_a_sweep_with_objectives_as_an_axis_keeps_its_model_names(tmp_path):
    summary = _summary()
    summary["models"] = ["spline-ml", "spline-fab"]
    for metric in summary["metrics"].values():
        metric["models"] = {"spline-ml": metric["models"]["spline"], "spline-fab": metric["models"]["spline"]}
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "metrics.json").write_text(json.dumps(summary))
    (tmp_path / "sweep.json").write_text(json.dumps({"train": {"steps": 250, "batch": 512}}))  # no one objective
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dipeptide", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split(" | ")[0] for line in done.stdout.splitlines() if line.startswith("| spline")]
    assert rows == ["| spline-ml", "| spline-fab"]


def test_no_sweep_is_an_error(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--dipeptide", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode != 0 and "no sweep report" in done.stderr
