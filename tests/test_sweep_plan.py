"""Sweep plans, before anything runs: models, seeds, objectives, inits, refinement, parts; bad input."""

from __future__ import annotations

import json
import socket
from dataclasses import replace
from pathlib import Path

import pytest
from _cli_helpers import _one_line_error

from bgp4.errors import InputError
from bgp4.settings import MODELS, RefineSettings, TrainSettings
from bgp4.sweep.runner import plan_sweep

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
        (["--workers", "-3"], "--workers must be 0 (the default size) or more, not -3"),
        (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "--workers sizes a local cluster, not --scheduler's"),
        (["--config", "seeded.toml"], "(--config) sets model, seed, workers: a sweep sets them"),
        (["--test-fraction", "1.5"], "test_fraction (--test-fraction) must be in (0, 1), got 1.5"),
        (["--test-fraction", "nan"], "test_fraction (--test-fraction) must be a finite number, got nan"),
        (["--data", "new.h5", "--temperature", "300"], "would simulate it at 600 K, not the 300 K of --temperature"),
        (["--batch", "100000"], "training frames, fewer than one batch of 100000 (--batch)"),
        (["--test-fraction", "0.0001"], "leaves no test frames out of"),
    ],
)
def test_bad_sweep_arguments_fail_cleanly_and_write_nothing(md_file, tmp_path, cli, args, message):
    (tmp_path / "seeded.toml").write_text('seed = 3\nmodel = "spline"\nsteps = 10\nworkers = 2\n')
    args = [str(tmp_path / a) if a in ("new.h5", "seeded.toml") else a for a in args]  # new.h5: the sweep would make it
    result = cli("sweep", "--data", md_file, "--out", tmp_path / "sweep", *args)
    assert message in _one_line_error(result)
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "new.h5").exists()


@pytest.mark.parametrize(
    "kind, message",
    [
        ("junk", "is not an mdtraj HDF5 trajectory file"),
        ("directory", "is a directory, not a data file"),
        ("no settings", "records no temperature; pass temperature (--temperature) in K"),
    ],
)
def test_data_that_train_would_refuse_is_refused_before_any_worker_starts(md_file, tmp_path, cli, kind, message):
    import mdtraj

    data = tmp_path / "d.h5"
    if kind == "junk":
        data.write_bytes(b"\x00not hdf5" * 100)
    elif kind == "directory":
        data.mkdir()
    else:  # a plain mdtraj file: frames, no bgp4 settings
        mdtraj.load(str(md_file), stride=10).save_hdf5(str(data))
    result = cli("sweep", "--data", data, "--out", tmp_path / "sweep")
    assert message in _one_line_error(result)
    assert not (tmp_path / "sweep").exists()
    if kind == "no settings":  # with its temperature a plain mdtraj file is data, as for `bgp4 train`
        settings = TrainSettings(steps=10, temperature=600.0, batch=256)
        plan = plan_sweep(tmp_path / "sweep", data, ["rnvp"], 1, settings, 100)
        assert plan.md is None and not (tmp_path / "sweep").exists()
        # its frame count comes from the file's shape: 300 frames hold 270 for training, not a batch of 512
        with pytest.raises(InputError, match=r"has 270 training frames, fewer than one batch of 512 \(--batch\)"):
            plan_sweep(tmp_path / "sweep", data, ["rnvp"], 1, replace(settings, batch=512), 100)


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
