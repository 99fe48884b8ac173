"""Tiny sweeps on a LocalCluster: runs and a report over seeds, objectives, inits, AIS, reruns, a killed worker."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _cli_helpers import start_cli

from bgp4.settings import TrainSettings

TINY = "--steps 60 --energy-steps 5 --blocks 2 --hidden 16 --batch 64 --eval-every 20 --samples 300 --quiet".split()


def _tiny_with_steps(steps: int) -> list[str]:
    """TINY with another --steps."""
    at = TINY.index("--steps")
    return [*TINY[:at], "--steps", str(steps), *TINY[at + 2 :]]


def _start_sweep(tmp_path, data_file, config, models: str, steps: int, **popen) -> subprocess.Popen:
    """`bgp4 sweep` of 2 seeds of `models` into tmp_path/s, in a child process with piped output."""
    args = ["sweep", "--data", str(data_file), "--out", "s", "--models", models, "--seeds", "2"]
    args += ["--config", str(config), *_tiny_with_steps(steps)]
    return start_cli(*args, cwd=tmp_path, **popen)


TINY_PARTS = _tiny_with_steps(300)  # 4 parts per run


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> Path:
    """3,000 frames of a short simulation (seeded: the same file on every machine), which the tiny
    sweeps train on. Tests that only plan a sweep, or refuse one, take the session's `md_file`."""
    from bgp4.simulation.md import MDSettings, simulate

    path = tmp_path_factory.mktemp("data") / "ala2.h5"

    simulate(path, MDSettings(frames=3000, equilibration_ps=2.0, replicas=2, seed=3), progress=False)
    return path


def _cli(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bgp4.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


# --------------------------------------------------------------------------- tiny sweeps


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def tiny_sweep(data_file, tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    result = _cli(
        "sweep", "--data", str(data_file), "--out", "s", "--models", "rnvp,p4inv", "--seeds", "2", *TINY_PARTS, cwd=root
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "s", result


@pytest.mark.slow
def test_tiny_sweep_writes_runs_and_a_report_over_seeds(tiny_sweep):
    out, result = tiny_sweep
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == ["p4inv-s0", "p4inv-s1", "rnvp-s0", "rnvp-s1"]
    for name in runs:
        assert (out / "runs" / name / "complete.json").exists() and (out / "runs" / name / "samples.h5").exists()
        assert "task finished" in (out / "runs" / name / "log.txt").read_text()
    # the same seed gives every model the same split
    for seed in (0, 1):
        a, b = (np.load(out / "runs" / f"{m}-s{seed}" / "split.npz") for m in ("rnvp", "p4inv"))
        assert np.array_equal(a["test"], b["test"])
    assert not np.array_equal(
        np.load(out / "runs" / "rnvp-s0" / "split.npz")["test"], np.load(out / "runs" / "rnvp-s1" / "split.npz")["test"]
    )
    metrics = json.loads((out / "report" / "metrics.json").read_text())
    nll = metrics["metrics"]["test_nll"]
    for model in ("rnvp", "p4inv"):
        per_run = [
            json.loads((out / "runs" / f"{model}-s{s}" / "complete.json").read_text())["test_nll_end"] for s in (0, 1)
        ]
        assert nll["models"][model]["values"] == {"0": per_run[0], "1": per_run[1]}
        assert nll["models"][model]["mean"] == pytest.approx(np.mean(per_run))
    assert {"energy_shift_kT", "reverse_ess", "ramachandran_kl", "train_wall_min"} <= set(metrics["metrics"])
    assert nll["paired"]["p4inv"]["n"] == 2
    for name in ("seeds.png", "energies.png", "report.md"):
        assert (out / "report" / name).stat().st_size > 0


@pytest.mark.slow
def test_a_sweep_on_a_plain_mdtraj_file_takes_its_temperature_through_to_the_report(data_file, tmp_path):
    import mdtraj

    plain = tmp_path / "plain.h5"
    mdtraj.load(str(data_file)).save_hdf5(str(plain))  # frames only: no recorded temperature
    args = ["sweep", "--data", str(plain), "--out", "s", "--models", "rnvp", "--seeds", "1", *TINY]
    result = _cli(*args, "--temperature", "600", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "s" / "runs" / "rnvp-s0" / "report" / "metrics.json").read_text())
    assert metrics["temperature_K"] == 600.0
    again = _cli("analyze", "--sweep", "s", "--refresh", "--workers", "1", cwd=tmp_path)  # the report's own analysis
    assert again.returncode == 0, again.stderr[-3000:]


@pytest.mark.slow
def test_a_sweep_over_objectives_reports_each_variant(data_file, tmp_path):
    fab = ["--fab-levels", "2", "--fab-buffer", "128", "--fab-reuse", "2"]
    result = _cli(
        "sweep", "--data", str(data_file), "--out", "s", "--models", "rnvp", "--objectives", "ml,kl,fab",
        "--seeds", "2", *TINY, *fab, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "s"
    variants = ("rnvp-ml", "rnvp-kl", "rnvp-fab")
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(f"{v}-s{s}" for v in variants for s in (0, 1))
    for variant in variants:
        summary = json.loads((out / "runs" / f"{variant}-s0" / "complete.json").read_text())
        assert summary["objective"] == variant.split("-")[1] and summary["md_frames"] > 0
        assert (summary["energy_evaluations"] > 0) == (variant != "rnvp-ml")  # ml spends none
    metrics = json.loads((out / "report" / "metrics.json").read_text())
    assert set(metrics["metrics"]["reverse_ess"]["models"]) == set(variants)
    assert metrics["metrics"]["reverse_ess"]["paired"]["rnvp-fab"]["n"] == 2  # against the first variant, ml


@pytest.mark.slow
def test_a_sweep_can_start_every_run_from_a_finished_sweep(tiny_sweep, data_file, tmp_path):
    """FAB and KL after a likelihood sweep, over seeds: each run starts from the run of its model and
    seed, and counts that run's MD frames as its own."""
    first, _ = tiny_sweep
    fab = ["--fab-levels", "2", "--fab-buffer", "128", "--fab-reuse", "2"]
    tiny = _tiny_with_steps(0)
    result = _cli(
        "sweep", "--data", str(data_file), "--out", "s", "--models", "rnvp", "--objectives", "kl,fab",
        "--seeds", "2", "--init", str(first), *tiny, *fab, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((tmp_path / "s" / "sweep.json").read_text())
    for variant in ("rnvp-kl", "rnvp-fab"):
        for seed in (0, 1):
            name = f"{variant}-s{seed}"
            source = first / "runs" / f"rnvp-s{seed}"
            assert record["runs"][name]["init"] == str(source)
            mine = json.loads((tmp_path / "s" / "runs" / name / "complete.json").read_text())
            theirs = json.loads((source / "complete.json").read_text())
            assert mine["md_frames"] == 0 and mine["energy_evaluations"] > 0
            assert mine["md_frames_total"] == theirs["md_frames_total"] > 0


@pytest.mark.slow
def test_a_refined_sweep_reports_each_model_raw_and_after_ais(data_file, tmp_path):
    args = ["sweep", "--data", str(data_file), "--out", "s", "--models", "rnvp", "--seeds", "2", *TINY]
    result = _cli(*args, "--refine", "2", "--refine-steps", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "s"
    for seed in (0, 1):
        run = out / "runs" / f"rnvp-s{seed}"
        assert (run / "samples-refined.h5").exists() and "refine: refined" in (run / "log.txt").read_text()
    metrics = json.loads((out / "report" / "metrics.json").read_text())
    assert metrics["models"] == ["rnvp", "rnvp +AIS(2)"]
    ess = metrics["metrics"]["reverse_ess"]["models"]["rnvp +AIS(2)"]
    assert ess["n"] == 2 and 0 < ess["mean"] <= 1
    evals = metrics["metrics"]["energy_evals_per_sample"]["models"]
    assert evals["rnvp"]["mean"] == 1 and evals["rnvp +AIS(2)"]["mean"] > 1
    again = _cli(*args, "--refine", "2", "--refine-steps", "0", cwd=tmp_path)
    assert again.returncode == 0 and "all 2 runs are complete" in again.stdout


@pytest.mark.slow
def test_a_run_trained_in_parts_by_the_sweep_equals_an_unbroken_run(tiny_sweep, tmp_path):
    import dataclasses

    import torch

    from bgp4.generator.train import train

    out, _ = tiny_sweep
    for run in (out / "runs").iterdir():
        tasks = [json.loads(line) for line in (run / "sweep-tasks.jsonl").read_text().splitlines()]
        assert [t["until"] for t in tasks if t["task"] == "train"] == [100, 200, 300, 305]
        assert [t["task"] for t in tasks][-1] == "finish"
    run = out / "runs" / "p4inv-s1"
    stored = json.loads((run / "settings.json").read_text())
    settings = TrainSettings(**{f.name: stored[f.name] for f in dataclasses.fields(TrainSettings)})
    train(settings, tmp_path / "unbroken", progress=False)
    parts, unbroken = (
        torch.load(r / "model.pt", weights_only=True)["state_dict"] for r in (run, tmp_path / "unbroken")
    )
    assert parts.keys() == unbroken.keys()
    # The float64 PCA of the training frames (LAPACK) can differ in its last bits between two processes
    # with other thread counts (the sweep's worker runs 1, this process 2): seen only on a busy machine,
    # 8.5e-15 in pca_vectors, with every trained weight and logged figure still equal.
    exact = [k for k in parts if ".pca_" not in k]
    assert len(exact) < len(parts) and all(torch.equal(parts[k], unbroken[k]) for k in exact)
    assert all(torch.allclose(parts[k], unbroken[k], rtol=0.0, atol=1e-12) for k in parts)
    assert [r["global_step"] for r in _records(run)] == [r["global_step"] for r in _records(tmp_path / "unbroken")]


@pytest.mark.slow
def test_report_figures_drawn_elsewhere_or_here_when_that_fails(tiny_sweep):
    from concurrent.futures import ThreadPoolExecutor

    from bgp4.report.aggregate import write_sweep_report

    class Broken(ThreadPoolExecutor):  # a worker that cannot draw them (died, or sees no directory)
        def submit(self, *args, **kwargs):
            raise OSError("worker lost")

    out, _ = tiny_sweep
    figure = out / "report" / "seeds.png"
    with ThreadPoolExecutor(2) as pool:
        drawn = write_sweep_report(out, executor=pool)
    assert drawn["figures"] == {"seeds": ["seeds.png", "seeds.pdf"], "energies": ["energies.png", "energies.pdf"]}
    figure.unlink()
    with Broken(1) as broken:
        assert write_sweep_report(out, executor=broken)["metrics"] == drawn["metrics"]
    assert figure.stat().st_size > 0


@pytest.mark.slow
def test_rerun_skips_every_finished_run(tiny_sweep, data_file):
    out, _ = tiny_sweep
    models = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/model.pt")}
    logs = {p: p.read_text() for p in (out / "runs").glob("*/log.txt")}
    again = _cli(
        "sweep",
        "--data",
        str(data_file),
        "--out",
        "s",
        "--models",
        "rnvp,p4inv",
        "--seeds",
        "2",
        *TINY_PARTS,
        cwd=out.parent,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "all 4 runs are complete" in again.stdout
    assert models == {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/model.pt")}
    assert logs == {p: p.read_text() for p in (out / "runs").glob("*/log.txt")}  # no task ran


@pytest.mark.slow
def test_a_run_resumed_over_samples_of_an_earlier_version_draws_them_again(data_file, tmp_path):
    """A run killed after drawing its samples, then resumed by a newer bgp4 whose log q has another
    term: the sweep draws the outdated samples again (sweeps have no --overwrite to ask for it)."""
    import tables

    from bgp4.flows.coordinates import LOG_Q
    from bgp4.simulation.data import SETTINGS_ATTR, read_settings

    args = ("sweep", "--data", str(data_file), "--out", "s", "--models", "rnvp", "--seeds", "1", *TINY)
    assert _cli(*args, cwd=tmp_path).returncode == 0
    run = tmp_path / "s" / "runs" / "rnvp-s0"
    (run / "sweep-done.json").unlink()
    with tables.open_file(str(run / "samples.h5"), "a") as h5:
        record = json.loads(h5.root._v_attrs[SETTINGS_ATTR])
        del record["log_q"]
        h5.root._v_attrs[SETTINGS_ATTR] = json.dumps(record)
    again = _cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert read_settings(run / "samples.h5")["log_q"] == LOG_Q
    log = (run / "log.txt").read_text()
    assert log.count("sample: sampled") == 2 and log.count("analyze: metrics") == 2


@pytest.mark.slow
def test_killed_worker_is_retried_and_the_run_resumes(data_file, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text("checkpoint-minutes = 0.0002\n")  # a checkpoint at almost every step
    sweep = _start_sweep(tmp_path, data_file, config, "rnvp,p4inv", 400)
    killed = None
    deadline = time.monotonic() + 600
    while killed is None and time.monotonic() < deadline and sweep.poll() is None:
        for run in (tmp_path / "s" / "runs").glob("*"):
            log, metrics = run / "log.txt", run / "metrics.jsonl"
            if (
                not (log.exists() and metrics.exists() and (run / "checkpoint.pt").exists())
                or (run / "complete.json").exists()
            ):
                continue
            steps = [r["global_step"] for r in _records(run)]
            if steps and steps[-1] >= 100:
                killed_pid = re.findall(r"pid (\d+): task started", log.read_text())[-1]
                os.kill(int(killed_pid), signal.SIGKILL)
                killed = run
                break
        time.sleep(0.05)
    stdout, stderr = sweep.communicate(timeout=900)
    assert killed is not None, "no run was caught mid-training"
    assert sweep.returncode == 0, stderr[-3000:]
    runs = sorted((tmp_path / "s" / "runs").iterdir())
    assert len(runs) == 4 and all((r / "complete.json").exists() for r in runs)
    # the task the killed worker was on (this run's part, or another's) ran again on another process
    starts = [
        (log.parent.name, pid, what)
        for log in runs
        for pid, what in re.findall(r"pid (\d+): task started: (.*)", (log / "log.txt").read_text())
    ]
    lost = [(run, what) for run, pid, what in starts if pid == killed_pid]
    assert any((run, what) in lost for run, pid, what in starts if pid != killed_pid)
    for run in runs:
        steps = [r["global_step"] for r in _records(run)]
        assert steps == sorted(set(steps)), f"duplicated records in {run.name}"
    twin = next(r for r in runs if r != killed and r.name.split("-")[0] == killed.name.split("-")[0])
    assert len(_records(killed)) == len(_records(twin))
    assert (
        json.loads((tmp_path / "s" / "report" / "metrics.json").read_text())["metrics"]["test_nll"]["models"]["rnvp"][
            "n"
        ]
        == 2
    )


@pytest.mark.slow
def test_interrupted_sweep_checkpoints_its_running_runs(data_file, tmp_path):
    """Ctrl-C (SIGINT to the whole process group, local workers included): running trainings
    save a checkpoint at their next step (not only every --checkpoint-minutes) before the
    command exits with code 130."""
    config = tmp_path / "run.toml"
    config.write_text("checkpoint-minutes = 60.0\n")  # no periodic checkpoint within this test
    sweep = _start_sweep(tmp_path, data_file, config, "rnvp", 100000, start_new_session=True)
    runs = [tmp_path / "s" / "runs" / f"rnvp-s{seed}" for seed in (0, 1)]
    deadline = time.monotonic() + 600
    while not all((r / "metrics.jsonl").exists() and [x for x in _records(r) if x["global_step"] >= 100] for r in runs):
        assert time.monotonic() < deadline and sweep.poll() is None, "the runs never reached step 100"
        time.sleep(0.1)
    assert sweep.poll() is None and not any((r / "checkpoint.pt").exists() for r in runs)
    os.killpg(sweep.pid, signal.SIGINT)
    stdout, stderr = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, stderr[-3000:]
    assert "saved their progress" in stdout and "rerun the same command to resume" in stderr
    import torch

    for run in runs:
        step = torch.load(run / "checkpoint.pt", weights_only=False)["step"]
        assert 100 <= step < 100000 and not (run / "complete.json").exists()
        assert "task stopped" in (run / "log.txt").read_text()
