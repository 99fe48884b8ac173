"""Training objectives ml, mixed, kl, fab: defaults and costs, FAB's exact resume, runs from the molecule alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _cli_helpers import _one_line_error
from _train_helpers import TINY, _assert_same_model, _killed_at

from bgp4.generator.rundir import RunDirectory
from bgp4.generator.train import TrainSettings, train

# ------------------------------------------------------------------ objectives: ml, mixed, kl, fab
FAB_TINY = dict(objective="fab", fab_levels=2, fab_moves=1, fab_independence=1, fab_buffer=128, fab_reuse=2)


def test_each_objective_resolves_its_own_defaults():
    paper = TrainSettings().validated()
    assert (paper.objective, paper.energy_lr, paper.clip_grad, paper.energy_steps) == ("mixed", 1e-5, 0.0, 2_000)
    assert TrainSettings(objective="ml").validated().energy_steps == 0  # likelihood only
    for objective in ("kl", "fab"):
        s = TrainSettings(objective=objective).validated()
        assert (s.energy_lr, s.clip_grad) == (1e-4, 10.0)  # a larger step and clipped gradients
    assert TrainSettings(objective="fab", energy_lr=3e-4, clip_grad=0).validated().energy_lr == 3e-4
    assert TrainSettings(model="spline").validated().clip_grad == 10.0  # the spline kinds as before
    without = TrainSettings(data="none", objective="kl", steps=0, init="somewhere").validated()
    assert without.data == "" and not without.has_data


@pytest.mark.slow
def test_kl_and_fab_train_from_a_finished_run_without_data_and_count_their_costs(md_file, tmp_path, cli, monkeypatch):
    from bgp4.generator.fab import FabSampler
    from bgp4.generator.model import load_generator

    base = TrainSettings(data=str(md_file), model="rnvp", **{**TINY, "steps": 20, "energy_steps": 0, "eval_every": 10})
    first, _ = train(base, tmp_path / "ml", progress=False)
    n_train = len(np.load(tmp_path / "ml" / "split.npz")["train"])
    assert first["objective"] == "mixed" and first["md_frames"] == n_train and first["energy_evaluations"] == 0
    common = ("--data", "none", "--init", tmp_path / "ml", "--model", "rnvp", "--blocks", "2", "--hidden", "32")
    common += ("--batch", "64", "--steps", "0", "--workers", "1", "--eval-every", "2", "--quiet")
    kl = cli("train", *common, "--objective", "kl", "--energy-steps", "3", "--out", tmp_path / "kl")
    assert kl.returncode == 0, kl.stderr
    assert "192 target energy evaluations" in kl.stdout  # 3 steps of 64 flow samples
    fab_flags = ("--fab-levels", "2", "--fab-buffer", "128", "--fab-reuse", "2")
    original, ais_evaluations = FabSampler.run, []

    def counted(self, *args, **kwargs):  # the target evaluations of every AIS run, as it reports them
        batch = original(self, *args, **kwargs)
        ais_evaluations.append(batch.evaluations)
        return batch

    monkeypatch.setattr(FabSampler, "run", counted)
    fab = cli("train", *common, "--objective", "fab", *fab_flags, "--energy-steps", "4", "--out", tmp_path / "fab")
    assert fab.returncode == 0, fab.stderr
    start = load_generator(tmp_path / "ml" / "model.pt").state_dict()
    for name, objective in (("kl", "kl"), ("fab", "fab")):
        run = RunDirectory(tmp_path / name)
        summary = run.completion()
        assert summary["objective"] == objective and summary["temperature"] == 600.0
        assert summary["md_frames"] == 0 and summary["md_frames_total"] == n_train  # the ML run's frames
        assert summary["test_nll_end"] is None and run.settings()["data"] == ""
        assert summary["energy_evaluations_total"] == summary["energy_evaluations"] > 0
        tuned = load_generator(run.file("model.pt")).state_dict()
        assert any(not torch.equal(tuned[k], start[k]) for k in start)
    records = list(RunDirectory(tmp_path / "fab").records())
    # the buffer is filled once (an eighth of 128 < one batch: one AIS batch), then one AIS batch per 2 steps
    ais = [r for r in records if r.get("flow_ess") is not None]
    assert [r["global_step"] for r in ais] == [2, 4] and all(r["buffer_size"] >= 64 for r in ais)
    for key in ("ais_acceptance", "ais_independence_acceptance"):  # both kinds of move are logged
        assert all(0.0 <= r[key] <= 1.0 for r in ais), key
    # each AIS batch: 64 samples evaluated once, then at most 2 moves of each live sample per level;
    # FAB evaluates the target in its AIS runs only, so the count is exactly theirs
    assert len(ais_evaluations) == 2 and all(64 <= n <= 64 * (1 + 2 * 2) for n in ais_evaluations)
    assert records[-1]["energy_evaluations"] == sum(ais_evaluations)
    assert RunDirectory(tmp_path / "fab").completion()["energy_evaluations"] == sum(ais_evaluations)


@pytest.mark.slow
def test_fab_resumes_exactly_after_a_kill_in_or_between_steps(md_file, tmp_path, monkeypatch):
    """The replay buffer, step sizes and the AIS and draw streams are in the checkpoint: a kill
    between steps or inside an AIS run resumes to the same model as an unbroken run."""
    from bgp4.generator.fab import FabSampler

    settings = TrainSettings(
        data=str(md_file), model="rnvp", checkpoint_minutes=1e-9, **{**TINY, "steps": 0, "energy_steps": 7}, **FAB_TINY
    )
    train(settings, tmp_path / "unbroken", progress=False)
    _killed_at(settings, tmp_path / "between", 5, monkeypatch)
    state = torch.load(tmp_path / "between" / "checkpoint.pt", weights_only=True)
    assert state["step"] == 5 and state["objective"]["replay"]["log_w"].numel() >= 128
    train(settings, tmp_path / "between", progress=False)
    _assert_same_model(tmp_path / "unbroken", tmp_path / "between")

    original, calls = FabSampler.run, []

    def killed_in_ais(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the AIS run of step 4 (runs at steps 0, 2, 4, 6)
            raise RuntimeError("simulated kill")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(FabSampler, "run", killed_in_ais)
    with pytest.raises(RuntimeError, match="simulated kill"):
        train(settings, tmp_path / "inside", progress=False)
    monkeypatch.setattr(FabSampler, "run", original)
    train(settings, tmp_path / "inside", progress=False)
    _assert_same_model(tmp_path / "unbroken", tmp_path / "inside")
    assert (
        RunDirectory(tmp_path / "inside").completion()["energy_evaluations"]
        == (RunDirectory(tmp_path / "unbroken").completion()["energy_evaluations"])
    )


@pytest.mark.slow
def test_kl_from_scratch_uses_the_data_for_its_transform_only(md_file, tmp_path):
    settings = TrainSettings(data=str(md_file), model="rnvp", objective="kl", **{**TINY, "steps": 0, "energy_steps": 2})
    summary, _ = train(settings, tmp_path / "kl", progress=False)
    assert summary["md_frames"] == 0 and summary["energy_evaluations"] == 2 * TINY["batch"]
    assert summary["test_nll_end"] is not None  # held-out frames still score the flow
    config = torch.load(tmp_path / "kl" / "model.pt", weights_only=True)["config"]
    assert "fitted_to" not in config  # the transform came from the frames, not from a structure fit


# ------------------------------------------------------------------ from scratch: the molecule alone
SCRATCH = dict(data="none", molecule="alanine-dipeptide", temperature=600.0, model="rnvp")


@pytest.mark.slow
def test_kl_and_fab_train_from_the_molecule_alone_and_resume_exactly(tmp_path, monkeypatch, cli):
    """No MD data, no --init: the transform is fitted to the minimized structure; every record's
    reverse KL and weights are finite, the run costs energy evaluations only, and a kill resumes
    to the same model."""
    settings = TrainSettings(**SCRATCH, **{**TINY, "steps": 0, "energy_steps": 6, "eval_every": 2}, objective="kl")
    summary, trained = train(settings, tmp_path / "kl", progress=False)
    assert trained and summary["md_frames_total"] == 0 and summary["test_nll_end"] is None
    assert summary["energy_evaluations"] == 6 * TINY["batch"] and summary["temperature"] == 600.0
    energy = [r for r in RunDirectory(tmp_path / "kl").records() if r["phase"] == "energy"]
    assert len(energy) == 3 and all(np.isfinite(r["reverse_kl"]) and r["batch_ess"] > 0 for r in energy)
    record = RunDirectory(tmp_path / "kl").settings()
    assert (record["molecule"], record["forcefield"], record["solvent"], record["constraints"]) == (
        "alanine-dipeptide",
        "amber99sb-ildn",
        "obc",
        "hbonds",
    )
    model = torch.load(tmp_path / "kl" / "model.pt", weights_only=True)["config"]
    assert model["fitted_to"] == "structure" and model["molecule"] == "alanine-dipeptide"
    _killed_at(settings, tmp_path / "killed", 3, monkeypatch)
    train(settings, tmp_path / "killed", progress=False)
    _assert_same_model(tmp_path / "kl", tmp_path / "killed")
    # the same from the command line, with FAB and a peptide by its sequence at 300 K in vacuum, every bond free
    args = ("--data", "none", "--molecule", "sequence:a", "--temperature", "300", "--solvent", "vacuum")
    args += ("--constraints", "none")
    args += ("--steps", "0", "--model", "spline", "--blocks", "1", "--hidden", "32", "--batch", "64")
    args += ("--objective", "fab", "--fab-levels", "2", "--fab-buffer", "128", "--fab-reuse", "2")
    fab = cli("train", *args, "--energy-steps", "4", "--workers", "1", "--quiet", "--out", tmp_path / "fab")
    assert fab.returncode == 0, fab.stderr
    done = RunDirectory(tmp_path / "fab")
    assert done.completion()["molecule"] == "sequence:A" and done.settings()["solvent"] == "vacuum"
    assert done.settings()["constraints"] == "none" and done.completion()["n_dims"] == 3 * 22 - 6
    assert done.completion()["energy_evaluations"] > 0
    fab_records = [r for r in done.records() if "fab_loss" in r]
    assert fab_records and all(np.isfinite(r["fab_loss"]) for r in fab_records)
    assert fab_records[-1]["skipped_steps"] == 0


def test_runs_from_scratch_refuse_what_they_cannot_do(md_file, tmp_path, cli):
    tiny = ("--model", "rnvp", "--blocks", "1", "--hidden", "32", "--batch", "64", "--steps", "0", "--quiet")
    scratch = ("--data", "none", "--objective", "kl", *tiny)
    cases = [
        (scratch, "needs the molecule (--molecule NAME or --pdb FILE"),
        ((*scratch, "--molecule", "alanine-dipeptide"), "temperature (--temperature) is needed"),
        ((*scratch, "--molecule", "alanine-dipeptide", "--pdb", "x.pdb", "--temperature", "300"), "not both"),
        ((*scratch, "--molecule", "benzene", "--temperature", "300"), "unknown molecule 'benzene'"),
        ((*scratch, "--molecule", "alanine-dipeptide", "--temperature", "300", "--solvent", "water"), "solvent"),
        ((*scratch, "--pdb", str(tmp_path / "none.pdb"), "--temperature", "300"), "no structure file at"),
        (("--data", "none", "--objective", "ml", "--molecule", "alanine-dipeptide"), "objective ml (--objective)"),
        (("--data", str(md_file), "--objective", "kl", "--molecule", "alanine-dipeptide"), "the data file (--data)"),
        (("--data", str(md_file), "--constraints", "none"), "constraints (--constraints) is for a run from scratch"),
        (
            (*scratch, "--molecule", "alanine-dipeptide", "--temperature", "300", "--constraints", "hbonds")
            + ("--no-fix-constrained",),
            "p/q is unbounded",
        ),
    ]
    for args, message in cases:
        line = _one_line_error(cli("train", "--out", str(tmp_path / "bad"), *args))
        assert message in line, line
        assert not (tmp_path / "bad").exists()
