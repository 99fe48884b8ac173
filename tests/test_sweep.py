"""Sweeps on Dask: statistics over seeds, bad input, tiny sweeps on a LocalCluster, a killed worker."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bgp4.errors import InputError
from bgp4.report.aggregate import _interval, collect, paired_difference, render, summarize_sweep, t_interval
from bgp4.settings import MODELS, RefineSettings, TrainSettings
from bgp4.sweep.runner import plan_sweep

TINY = [
    "--steps",
    "60",
    "--energy-steps",
    "5",
    "--blocks",
    "2",
    "--hidden",
    "16",
    "--batch",
    "64",
    "--eval-every",
    "20",
    "--samples",
    "300",
    "--quiet",
]
TINY_PARTS = [*TINY[: TINY.index("--steps")], "--steps", "300", *TINY[TINY.index("--steps") + 2 :]]  # 4 parts per run


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


def _one_line_error(result: subprocess.CompletedProcess | SimpleNamespace) -> str:
    """The one stderr line of a refused command (in-process `cli` result or subprocess), exit code 2."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


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


# --------------------------------------------------------------------------- bad input


def test_plan_validates_models_seeds_and_existing_runs(md_file, tmp_path):
    base = TrainSettings(steps=10)
    with pytest.raises(InputError, match="unknown model"):
        plan_sweep(tmp_path / "s", md_file, ["rnvp", "nope"], 2, base, 100)
    with pytest.raises(InputError, match="--seeds"):
        plan_sweep(tmp_path / "s", md_file, list(MODELS[:1]), 0, base, 100)
    plan = plan_sweep(tmp_path / "s", md_file, list(MODELS), 2, base, 100, threads_per_run=2)
    assert [(r.model, r.seed) for r in plan.runs] == [(m, s) for m in MODELS for s in (0, 1)]
    assert all(r.train["workers"] == 2 and r.train["device"] == "cpu" for r in plan.runs)
    assert not (tmp_path / "s").exists()
    # an existing run with other settings is refused before anything starts
    run = Path(plan.runs[0].path)
    run.mkdir(parents=True)
    (run / "settings.json").write_text(json.dumps({**plan.runs[0].train, "steps": 11}))
    with pytest.raises(InputError, match="steps"):
        plan_sweep(tmp_path / "s", md_file, list(MODELS), 2, base, 100)


def test_per_model_settings_replace_the_shared_ones(md_file, tmp_path):
    base = TrainSettings(steps=10)
    plan = plan_sweep(
        tmp_path / "s",
        md_file,
        ["rnvp", "spline"],
        1,
        base,
        100,
        by_model={"spline": TrainSettings(steps=7, batch=32)},
    )
    steps = {r.model: (r.train["steps"], r.train["batch"], r.train["device"]) for r in plan.runs}
    assert steps == {"rnvp": (10, 256, "cpu"), "spline": (7, 32, "cpu")}
    # the longest runs are handed out first: here rnvp's 10 steps of 256 frames
    from bgp4.sweep.dispatch import expected_cost

    costs = {r.model: expected_cost(r) for r in plan.runs}
    assert costs["rnvp"] > costs["spline"] > 0


def test_runs_are_handed_out_in_parts_most_training_left_first(md_file, tmp_path):
    from bgp4.sweep.dispatch import ENERGY_STEP_COST, PARTS_PER_RUN, choose, next_stop, part_size, remaining_cost

    plan = plan_sweep(tmp_path / "s", md_file, ["rnvp", "p4inv"], 2, TrainSettings(steps=2400, energy_steps=200), 100)
    runs = {r.name: r for r in plan.runs}
    part = part_size(runs["rnvp-s0"])  # parts of equal cost: an energy step costs ENERGY_STEP_COST likelihood steps
    assert ENERGY_STEP_COST == 3 and PARTS_PER_RUN == 12 and part == (2400 + 3 * 200) // 12 == 250
    assert [next_stop(runs["rnvp-s0"], s) for s in (0, 249, 250, 2399)] == [250, 250, 500, 2400 + 34]
    assert [next_stop(runs["rnvp-s0"], s) for s in (2434, 2516, 2517)] == [2517, 2517, 2600]  # 83 energy steps each
    # energy steps cost more than likelihood steps; P4Inv steps more than RNVP steps
    assert remaining_cost(runs["rnvp-s0"], 2400) > remaining_cost(runs["rnvp-s0"], 2200) - remaining_cost(
        runs["rnvp-s0"], 2400
    )
    assert remaining_cost(runs["rnvp-s0"], 2600) == 0
    step = dict.fromkeys(runs, 0)

    def left(spec):
        return remaining_cost(spec, step[spec.name])

    order = [r.name for r in plan.runs]  # as planned: rnvp first
    assert choose([runs[n] for n in order], left).name == "p4inv-s0"  # the most left, first among equals
    step["p4inv-s0"] = part  # its first part ended: it goes on (the others have one part more at most) ...
    assert choose([runs[n] for n in order], left, last="p4inv-s0").name == "p4inv-s0"
    step["p4inv-s0"] = 2 * part  # ... but not two parts behind the others
    assert choose([runs[n] for n in order], left, last="p4inv-s0").name == "p4inv-s1"
    assert choose([runs["rnvp-s0"], runs["rnvp-s1"]], left, last="rnvp-s1").name == "rnvp-s1"


def test_objectives_are_an_axis_of_the_sweep(md_file, tmp_path):
    from bgp4.sweep.dispatch import ENERGY_STEP_COST, energy_step_cost, expected_cost

    base = TrainSettings(steps=100, energy_steps=50)
    plan = plan_sweep(tmp_path / "s", md_file, ["rnvp", "spline"], 2, base, 100, objectives=["mixed", "fab"])
    assert plan.models == ("rnvp-mixed", "rnvp-fab", "spline-mixed", "spline-fab")
    assert [r.name for r in plan.runs[:4]] == ["rnvp-mixed-s0", "rnvp-mixed-s1", "rnvp-fab-s0", "rnvp-fab-s1"]
    assert {(r.model, r.train["objective"], r.variant) for r in plan.runs if r.seed == 0} == {
        (m, o, f"{m}-{o}") for m in ("rnvp", "spline") for o in ("mixed", "fab")
    }
    record = plan.record()
    assert record["objectives"] == ["mixed", "fab"] and "objective" not in record["train"]
    assert record["runs"]["spline-fab-s1"] == {"model": "spline-fab", "kind": "spline", "objective": "fab", "seed": 1}
    # a fab step: one buffer step and a quarter of an AIS batch of 1 + 8 x (1 + 3) evaluations per sample
    fab = next(r for r in plan.runs if r.name == "rnvp-fab-s0")
    mixed = next(r for r in plan.runs if r.name == "rnvp-mixed-s0")
    assert energy_step_cost(mixed.train) == ENERGY_STEP_COST and energy_step_cost(fab.train) == 1 + 9
    assert energy_step_cost(fab.train | {"fab_leapfrog": 4}) == 1 + -(-(1 + 8 * (1 + 3 * 4)) // 4)  # HMC moves
    assert expected_cost(fab) == (100 + 10 * 50) * 256 > expected_cost(mixed)
    # one objective: the runs keep their names and take it
    single = plan_sweep(tmp_path / "t", md_file, ["rnvp"], 1, base, 100, objectives=["kl"])
    assert [(r.name, r.train["objective"]) for r in single.runs] == [("rnvp-s0", "kl")] and single.models == ("rnvp",)
    for bad, message in ((["mixed", "fab2"], "unknown objective"), (["kl", "kl"], "twice")):
        with pytest.raises(InputError, match=message):
            plan_sweep(tmp_path / "u", md_file, ["rnvp"], 1, base, 100, objectives=bad)
    assert not (tmp_path / "u").exists()


def test_init_names_a_sweep_whose_run_of_each_model_and_seed_starts_each_run(md_file, tmp_path):
    base = TrainSettings(steps=0, energy_steps=10, objective="kl")
    with pytest.raises(InputError, match="holds no sweep.json"):
        plan_sweep(tmp_path / "s", md_file, ["rnvp"], 1, replace(base, init=str(tmp_path)), 100)
    old = tmp_path / "old"
    old.mkdir()
    runs = {"rnvp-ml-s0": {"kind": "rnvp", "objective": "ml", "seed": 0}}
    runs["rnvp-kl-s0"] = {"kind": "rnvp", "objective": "kl", "seed": 0}
    (old / "sweep.json").write_text(json.dumps({"runs": runs}))
    from bgp4.sweep.runner import init_runs

    assert init_runs(old, ["rnvp"], (0,)) == {("rnvp", 0): str(old.resolve() / "runs" / "rnvp-ml-s0")}
    with pytest.raises(InputError, match="no run for model rnvp and seed 1"):
        init_runs(old, ["rnvp"], (0, 1))
    with pytest.raises(InputError, match="no run for model p4inv and seed 0"):
        plan_sweep(tmp_path / "s", md_file, ["p4inv"], 1, replace(base, init=str(old)), 100)
    with pytest.raises(InputError, match="own directory"):
        plan_sweep(old, md_file, ["rnvp"], 1, replace(base, init=str(old)), 100)
    runs.pop("rnvp-ml-s0")
    runs["rnvp-mixed-s0"] = {"kind": "rnvp", "objective": "mixed", "seed": 0}
    (old / "sweep.json").write_text(json.dumps({"runs": runs}))
    with pytest.raises(InputError, match="runs of objectives kl, mixed, none ml, for model rnvp and seed 0"):
        init_runs(old, ["rnvp"], (0,))
    (old / "sweep.json").write_text(json.dumps({"runs": {"rnvp-s0": {"model": "rnvp", "seed": 0}}}))  # before kinds
    assert init_runs(old, ["rnvp"], (0,)) == {("rnvp", 0): str(old.resolve() / "runs" / "rnvp-s0")}
    (old / "sweep.json").write_text("{not json")
    with pytest.raises(InputError, match="cannot be read"):
        init_runs(old, ["rnvp"], (0,))
    (old / "sweep.json").write_text(json.dumps({"runs": {"rnvp-ml-s0": runs["rnvp-kl-s0"]}}))
    with pytest.raises(InputError, match="not a finished bgp4 training run"):  # the run itself is checked too
        plan_sweep(tmp_path / "s", md_file, ["rnvp"], 1, replace(base, init=str(old)), 100)
    assert not (tmp_path / "s").exists()


def test_a_started_run_keeps_its_init_whatever_the_init_sweep_holds_now(md_file, tmp_path):
    """A resumed sweep does not look its runs' inits up again (the init sweep may have moved on)."""
    from bgp4.settings import settings_record
    from bgp4.sweep.runner import plan_sweep

    old = (tmp_path / "old").resolve()
    old.mkdir()
    (old / "sweep.json").write_text("{}")  # holds no run now
    base = TrainSettings(steps=0, energy_steps=10, objective="kl")
    started = replace(base, data=str(md_file.resolve()), model="rnvp", seed=0, workers=1, device="cpu")
    started = replace(started, init=str(old / "runs" / "rnvp-ml-s0"))
    run = tmp_path / "s" / "runs" / "rnvp-s0"
    run.mkdir(parents=True)
    (run / "settings.json").write_text(json.dumps(settings_record(started.validated())))
    plan = plan_sweep(tmp_path / "s", md_file, ["rnvp"], 1, replace(base, init=str(old)), 100)
    assert plan.runs[0].train["init"] == str(old / "runs" / "rnvp-ml-s0")
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(InputError, match="holds a run started from"):
        plan_sweep(tmp_path / "s", md_file, ["rnvp"], 1, replace(base, init=str(other)), 100)


def test_refinement_is_part_of_every_run_and_of_its_done_check(md_file, tmp_path):
    base = TrainSettings(steps=10)
    plan = plan_sweep(tmp_path / "s", md_file, ["rnvp"], 2, base, 100, refine=RefineSettings(levels=3, steps=0))
    assert all(r.refine["levels"] == 3 and r.refine["steps"] == 0 for r in plan.runs)
    assert plan.record()["refine"] == plan.runs[0].refine
    assert all(r.refine == {} for r in plan_sweep(tmp_path / "t", md_file, ["rnvp"], 1, base, 100).runs)
    assert all(
        r.refine == {}
        for r in plan_sweep(tmp_path / "t", md_file, ["rnvp"], 1, base, 100, refine=RefineSettings()).runs
    )
    with pytest.raises(InputError, match="--refine"):
        plan_sweep(tmp_path / "u", md_file, ["rnvp"], 1, base, 100, refine=RefineSettings(levels=-1))
    # a run finished without refinement is not done once refinement is asked for, and the reverse
    run = plan.runs[0]
    Path(run.path).mkdir(parents=True)
    run.stage().finish({"train": run.train, "sample": run.sample, "refine": {}})
    assert not run.done
    run.stage().finish({"train": run.train, "sample": run.sample, "refine": run.refine})
    assert run.done
    # how a run is executed (bgp4.settings.EXECUTION_ONLY) may change: a rerun does not redo it
    executed = run.train | {"workers": run.train["workers"] + 3, "checkpoint_minutes": 0.5}
    run.stage().finish({"train": executed, "sample": run.sample | {"workers": 7}, "refine": run.refine})
    assert run.done
    older = {k: v for k, v in run.train.items() if k != "fab_leapfrog"}  # a marker from before that setting
    run.stage().finish({"train": older, "sample": run.sample, "refine": run.refine})
    assert run.done
    run.stage().finish({"train": older | {"seed": 9}, "sample": run.sample, "refine": run.refine})
    assert not run.done
    assert not (tmp_path / "u").exists()


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


@pytest.mark.parametrize(
    "args, message",
    [
        (["--models", "rnvp,nonsense"], "unknown model"),
        (["--seeds", "0"], "--seeds"),
        (["--objectives", "ml,nonsense"], "unknown objective(s) nonsense (--objectives)"),
        (["--objectives", "kl,fab", "--fab-buffer", "0"], "fab_buffer (--fab-buffer) must be in"),
        (["--refine", "-1"], "levels (--refine) must be a non-negative integer"),
        (["--refine", "5", "--refine-steps", "0", "--refine-independence", "0"], "the levels would not move"),
        (["--preset", "huge"], "unknown preset 'huge'; choose one of quick, paper"),
        (["--worker-memory", "-1"], "--worker-memory must be 0 (no limit) or at least"),
        (["--worker-memory", "nan"], "--worker-memory must be 0 (no limit) or at least"),
        (["--worker-memory", "4", "--scheduler", "tcp://127.0.0.1:1"], "not of --scheduler's"),
    ],
)
def test_bad_sweep_arguments_fail_cleanly_and_write_nothing(md_file, tmp_path, cli, args, message):
    result = cli("sweep", "--data", md_file, "--out", tmp_path / "sweep", *args)
    assert message in _one_line_error(result)
    assert not (tmp_path / "sweep").exists()


def test_sweep_help_gives_its_own_meaning_of_device_and_init_and_no_from_scratch_flags(cli):
    text = " ".join(cli("sweep", "--help").stdout.split())  # rich wraps the help; compare the words
    assert "auto is cpu unless" in text and "A finished sweep: each run starts from" in text
    for flag in ("--molecule", "--pdb", "--forcefield", "--solvent", "--constraints"):
        assert flag not in text  # they need --data none, which a sweep never has
    assert "--fab-buffer" in text and "--temperature" in text  # train's other settings stay


def test_unanswered_scheduler_fails_cleanly_and_writes_nothing(md_file, tmp_path, cli):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = cli("sweep", "--data", md_file, "--out", tmp_path / "sweep", "--scheduler", f"tcp://127.0.0.1:{port}")
    assert "no Dask scheduler answered" in _one_line_error(result)
    assert not (tmp_path / "sweep").exists()


def test_the_wait_for_a_scheduler_is_bounded_by_the_connect_timeout(monkeypatch):
    import contextlib

    import distributed

    from bgp4.sweep import cluster

    waits = []

    def silent(address, timeout):
        waits.append(("socket", timeout))
        raise TimeoutError("timed out")

    monkeypatch.setattr(cluster.socket, "create_connection", silent)
    with pytest.raises(InputError, match=f"within {cluster.CONNECT_TIMEOUT_S} s"):
        with cluster.open_client("tcp://somewhere:8786", 1):
            pass
    monkeypatch.setattr(cluster.socket, "create_connection", lambda address, timeout: contextlib.nullcontext())

    def not_a_scheduler(address, timeout):
        waits.append(("client", timeout))
        raise OSError("the handshake timed out")

    monkeypatch.setattr(distributed, "Client", not_a_scheduler)
    with pytest.raises(InputError, match="no Dask scheduler answered"):
        with cluster.open_client("tcp://somewhere:8786", 1):
            pass
    # each wait is bounded by the timeout, under the 15 s the CLI promises: an address nobody answers
    # fails at the socket, one that answers but is no scheduler at the client
    assert waits == [("socket", cluster.CONNECT_TIMEOUT_S), ("client", cluster.CONNECT_TIMEOUT_S)]
    assert cluster.CONNECT_TIMEOUT_S < 15


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
    tiny = [*TINY[: TINY.index("--steps")], "--steps", "0", *TINY[TINY.index("--steps") + 2 :]]
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
    assert parts.keys() == unbroken.keys() and all(torch.equal(parts[k], unbroken[k]) for k in parts)
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
    args = [
        "sweep",
        "--data",
        str(data_file),
        "--out",
        "s",
        "--models",
        "rnvp,p4inv",
        "--seeds",
        "2",
        "--config",
        str(config),
        *TINY[: TINY.index("--steps")],
        "--steps",
        "400",
        *TINY[TINY.index("--steps") + 2 :],
    ]
    sweep = subprocess.Popen(
        [sys.executable, "-m", "bgp4.cli", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
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
    args = [
        "sweep",
        "--data",
        str(data_file),
        "--out",
        "s",
        "--models",
        "rnvp",
        "--seeds",
        "2",
        "--config",
        str(config),
        *TINY[: TINY.index("--steps")],
        "--steps",
        "100000",
        *TINY[TINY.index("--steps") + 2 :],
    ]
    sweep = subprocess.Popen(
        [sys.executable, "-m", "bgp4.cli", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
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


@pytest.mark.slow
def test_local_cluster_workers_keep_glibc_memory_trimming(monkeypatch):
    """Dask's nanny would set MALLOC_TRIM_THRESHOLD_=65536, which made FAB steps 3x slower; the
    thread limits it sets stay."""
    from bgp4.sweep.cluster import open_client

    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    with open_client(None, 1) as client:
        seen = list(
            client.run(lambda: {k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")}).values()
        )
    assert seen == [{"MALLOC_TRIM_THRESHOLD_": None, "OMP_NUM_THREADS": "1"}]


def _http_host(dask_scheduler) -> str:
    """The address the scheduler's HTTP server listens on (run on the scheduler)."""
    return dask_scheduler.http_server.address


@pytest.mark.slow
def test_two_local_clusters_at_once_print_nothing(capfd):
    """Two sweeps on one machine: the second's scheduler does not warn that port 8787 is taken, and
    each scheduler's HTTP server listens on this machine only."""
    import warnings

    from bgp4.sweep.cluster import open_client

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with open_client(None, 1) as first, open_client(None, 1) as second:
            assert first.submit(sum, [1, 2]).result() == 3 and second.submit(sum, [3, 4]).result() == 7
            where = [c.run_on_scheduler(_http_host) for c in (first, second)]
            assert where == ["127.0.0.1", "127.0.0.1"]
    assert not [str(w.message) for w in caught if "in use" in str(w.message)]
    assert capfd.readouterr().err == ""


def test_local_workers_get_a_share_of_the_memory_available_at_least_the_floor(monkeypatch):
    import psutil

    from bgp4.sweep import cluster

    available = type("Memory", (), {"available": 40 * 2**30})
    monkeypatch.setattr(psutil, "virtual_memory", lambda: available)
    assert cluster.local_memory_limit(2) == int(0.8 * 40 * 2**30 / 2)
    assert cluster.local_memory_limit(64) == int(cluster.MIN_WORKER_GIB * 2**30)
    assert cluster.local_memory_limit(2, 3.5) == int(3.5 * 2**30)
    assert cluster.local_memory_limit(2, 0) == 0  # no limit
    for bad in (-1, 0.001, float("nan"), float("inf")):
        with pytest.raises(InputError, match="--worker-memory"):
            cluster.local_memory_limit(2, bad)


@pytest.mark.slow
def test_a_local_worker_over_its_memory_limit_is_restarted_and_says_so(capfd):
    """A runaway worker is restarted by its nanny (a sweep's task then resumes in a fresh worker),
    with one warning line, instead of growing until the kernel kills it."""
    import dask
    from distributed import KilledWorker

    from bgp4.sweep.cluster import open_client

    def _hold_memory(gib: float, seconds: float) -> int:  # nested: Dask sends it by value
        import time

        import numpy as np

        held = np.ones(int(gib * 2**27))  # float64: touched, so resident
        time.sleep(seconds)
        return held.size

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):  # no rerun: one restart
        with open_client(None, 1, memory_limit=600 * 2**20) as client:
            # no pausing or spilling: a paused worker holding its cached runs would stall the sweep
            settings = client.run(lambda dask_worker: dask_worker.memory_manager.memory_pause_fraction)
            assert list(settings.values()) == [False]
            with pytest.raises(KilledWorker):
                client.submit(_hold_memory, 1.5, 10.0, pure=False).result()
            assert client.submit(_hold_memory, 0.01, 0.0, pure=False).result() > 0  # a fresh worker
    lines = [line for line in capfd.readouterr().err.splitlines() if "memory budget" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: Worker tcp://") and "--worker-memory" in lines[0]


def test_a_failed_run_says_why_in_one_line_and_names_the_memory_limit_when_its_workers_died():
    from distributed import KilledWorker

    from bgp4.sweep.dispatch import failure_reason

    assert failure_reason(ValueError("bad value\nmore detail")) == "bad value"
    assert failure_reason(RuntimeError()) == "RuntimeError"
    died = failure_reason(KilledWorker("train-abc", "tcp://127.0.0.1:1234", 3))
    assert "died each time" in died and "--worker-memory" in died and "\n" not in died


@pytest.mark.slow
def test_workers_started_elsewhere_with_the_trim_threshold_get_one_warning(capsys):
    """Workers that a user starts with a nanny keep its MALLOC_TRIM_THRESHOLD_: the sweep says so."""
    from distributed import LocalCluster

    from bgp4.sweep.cluster import open_client, trim_threshold_warning

    assert trim_threshold_warning({"tcp://a": None}) is None
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0", memory_limit=0) as cluster:
        with open_client(cluster.scheduler_address, 1):
            pass
    lines = [line for line in capsys.readouterr().err.splitlines() if "MALLOC_TRIM_THRESHOLD_" in line]
    assert lines == [
        "warning: 1 of 1 Dask workers run with MALLOC_TRIM_THRESHOLD_ set (the nanny's default), "
        "which made FAB steps 3x slower; start them with `dask worker ... --no-nanny`"
    ]


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P (the cwd off sys.path) is 3.11+")
def test_a_missing_data_file_is_simulated_by_this_bgp4_in_a_child(tmp_path, monkeypatch):
    from bgp4.simulation.data import load_trajectory, read_settings
    from bgp4.sweep.tasks import simulate_task

    decoy = tmp_path / "bgp4"  # a package named bgp4 in the cwd must not be the one the child runs
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the wrong bgp4')\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "data" / "ala2.h5"
    out.parent.mkdir()
    md = {"frames": 40, "equilibration_ps": 0.1, "replicas": 1, "seed": 2}
    assert simulate_task(str(out), md) == str(out)
    assert load_trajectory(out).n_frames == 40 and read_settings(out)["seed"] == 2
    assert "bgp4 simulate --frames 40" in (out.parent / "ala2.h5.log.txt").read_text()
    assert simulate_task(str(out), md) == str(out)  # done: kept
