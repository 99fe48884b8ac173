"""Training on tiny sizes: each model lowers the test NLL, augmentation, torch.compile, the losses and optimizers."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from _train_helpers import TINY, _tiny_trainer

from bgp4.errors import InputError
from bgp4.generator.rundir import RunDirectory
from bgp4.generator.train import Trainer, TrainSettings, train


@pytest.mark.slow
@pytest.mark.parametrize("model", ["rnvp", "p4inv", "spline"])
def test_short_training_lowers_test_nll(md_file, tmp_path, model):
    settings = TrainSettings(data=str(md_file), model=model, merge_every=10, correct_every=2, **TINY)
    summary, trained = train(settings, tmp_path / model, progress=False)
    assert trained
    # 48 dims, nothing to squeeze: the first steps gain less than the paper's 60-dim setup did
    assert summary["test_nll_end"] < summary["test_nll_start"] - 0.3
    assert summary["weights_defined"] and summary["n_dims"] == 48
    assert summary["energy_evaluations"] == TINY["energy_steps"] * TINY["batch"]
    run = RunDirectory(tmp_path / model)
    records = list(run.records())
    assert [r["global_step"] for r in records if "test_nll" in r] == [0, 50, 100, 150, 160]
    energy = [r for r in records if r["phase"] == "energy"]
    assert energy and np.isfinite(energy[-1]["energy_kT"])
    assert (tmp_path / model / "training.png").stat().st_size > 0
    from bgp4.generator.model import load_generator

    bg = load_generator(run.file("model.pt"))
    assert bg.config["kind"] == model
    if model == "p4inv":
        assert summary["p4inv_accepted"] + summary["p4inv_forced"] > 0
        assert summary["p4inv_max_residual"] < 1e-4


@pytest.mark.slow
def test_augment_relabels_methyl_hydrogens_of_each_batch(md_file, tmp_path):
    from bgp4.simulation.data import load_trajectory, relabel_rotors

    data = load_trajectory(md_file)
    settings = TrainSettings(
        data=str(md_file), model="rnvp", augment=True, compile="off", **{**TINY, "steps": 5, "energy_steps": 0}
    ).validated()
    (tmp_path / "aug").mkdir(), (tmp_path / "plain").mkdir()
    trainer = Trainer(settings, RunDirectory(tmp_path / "aug"), data)
    plain = Trainer(replace(settings, augment=False), RunDirectory(tmp_path / "plain"), data)
    idx = torch.arange(64)
    shifts = torch.randint(
        3, (64, 3), generator=torch.Generator().set_state(trainer.data.batch_gen.get_state())
    ).numpy()
    y_aug, ld_aug = trainer.data.batch(idx)
    y, _ = plain.data.batch(idx)
    # exactly the drawn relabelling of exactly these frames; a frame with all shifts 0 is unchanged
    expected = plain.data.flow_coordinates(
        relabel_rotors(trainer.data.train_xyz[idx.numpy()], trainer.data.rotors, shifts)
    )
    torch.testing.assert_close(y_aug, expected[0], rtol=0, atol=0)
    torch.testing.assert_close(ld_aug, expected[1], rtol=0, atol=0)
    assert torch.equal((y_aug != y).any(1), torch.as_tensor((shifts != 0).any(1)))
    assert torch.equal(trainer.data.test_y[0], plain.data.test_y[0])  # the test NLL scores frames as simulated
    summary, trained = train(settings, tmp_path / "run", progress=False)
    assert trained and np.isfinite(summary["test_nll_end"])
    assert json.loads((tmp_path / "run" / "settings.json").read_text())["augment"] is True


def test_augment_without_interchangeable_hydrogens_is_refused(md_file, tmp_path, monkeypatch):
    import bgp4.generator.train

    monkeypatch.setattr(bgp4.generator.train, "rotor_hydrogens", lambda molecule: [])
    settings = TrainSettings(data=str(md_file), model="rnvp", augment=True, compile="off", **TINY)
    with pytest.raises(InputError, match="no interchangeable hydrogen triples"):
        train(settings, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def _cxx_compiler() -> str | None:
    import os
    import shutil

    return next((c for c in (os.environ.get("CXX"), "g++", "c++", "clang++") if c and shutil.which(c)), None)


@pytest.mark.slow
@pytest.mark.skipif(_cxx_compiler() is None, reason="torch.compile on CPU needs a C++ compiler; none on PATH")
def test_compiled_likelihood_matches_eager_through_p4inv_merges(md_file, tmp_path):
    """The compiled training loss reads the P4Inv buffers that merges change in place."""
    from torch._dynamo.utils import counters

    from bgp4.simulation.data import load_trajectory

    settings = TrainSettings(data=str(md_file), model="p4inv", compile="on", merge_every=2, **TINY).validated()
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    trainer = Trainer(settings, run, load_trajectory(settings.data))
    graphs, autograd = counters["stats"]["unique_graphs"], counters["aot_autograd"]["ok"]
    breaks = sum(counters["graph_break"].values())
    trainer.loop.compile(progress=False)
    # with a compiler at hand compiling must work, and really go through dynamo and AOT autograd
    assert trainer.loop.compiled, f"torch.compile failed although {_cxx_compiler()} is on PATH"
    assert counters["stats"]["unique_graphs"] > graphs and counters["aot_autograd"]["ok"] > autograd
    assert sum(counters["graph_break"].values()) == breaks  # no silent fallback to eager inside it
    y, ld = trainer.data.train_y[0][:64], trainer.data.train_y[1][:64]
    for _ in range(6):  # three merges: A, A_inv and log|det A| change under the compiled graph
        trainer.loop.train_step(None)
        torch.testing.assert_close(trainer.loop.batch_nll(y, ld), trainer.loop.nll(y, ld), rtol=1e-4, atol=1e-3)
    assert trainer.loop.scheduler.stats["accepted"] + trainer.loop.scheduler.stats["forced"] > 0


def test_failed_compile_falls_back_to_eager(md_file, tmp_path, monkeypatch, capsys):
    from bgp4.simulation.data import load_trajectory

    def broken_compile(fn, **kwargs):
        def compiled(*args):
            raise RuntimeError("no C++ compiler found")

        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    settings = TrainSettings(data=str(md_file), model="p4inv", compile="on", **TINY).validated()
    trainer = Trainer(settings, run, load_trajectory(settings.data))
    trainer.loop.compile(progress=False)
    assert not trainer.loop.compiled and trainer.loop.batch_nll == trainer.loop.nll
    assert "torch.compile failed (RuntimeError: no C++ compiler found); training without it" in capsys.readouterr().err
    assert all(p.grad is None for p in trainer.bg.parameters())
    assert trainer.loop.train_step(None) is not None  # eager training goes on


@pytest.mark.parametrize(
    "model, steps, energy_steps, objective, compiles",
    [
        ("rnvp", 2999, 0, "ml", False),
        ("rnvp", 3000, 0, "ml", True),
        ("spline", 999, 0, "ml", False),
        ("spline", 1000, 0, "ml", True),
        ("spline", 500, 600, "kl", False),  # reverse-KL steps never go through the likelihood
        ("spline", 500, 600, "fab", True),  # FAB's buffer steps do
    ],
)
def test_auto_compile_counts_likelihood_steps_per_kind(
    md_file, tmp_path, monkeypatch, model, steps, energy_steps, objective, compiles
):
    from bgp4.simulation.data import load_trajectory

    # Stands in for the compiler: a distinct callable, so the loop's choice shows without a compile.
    monkeypatch.setattr(torch, "compile", lambda fn, dynamic: lambda *args: fn(*args))
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    tiny = {**TINY, "steps": steps, "energy_steps": energy_steps}
    settings = TrainSettings(data=str(md_file), model=model, objective=objective, **tiny).validated()
    trainer = Trainer(settings, run, load_trajectory(settings.data))
    trainer.loop.compile(progress=False)
    assert trainer.loop.compiled == compiles


# ------------------------------------------------------------------ the energy-phase loss
def test_energy_phase_loss_weights_and_masks_out_of_domain_samples():
    from bgp4.generator.train import energy_phase_loss
    from bgp4.simulation.energy import regularize_energy

    nll = torch.tensor(3.0, requires_grad=True)
    u = torch.tensor([1.0, 2.0, 5e3, float("inf"), -7.0])  # kT: one above the soft cap, one unevaluable
    log_q = torch.tensor([0.5, -1.0, 2.0, 0.0, 100.0], requires_grad=True)
    ok = torch.tensor([True, True, True, True, False])  # the last sample left the IC domain
    loss, info = energy_phase_loss(nll, u, log_q, ok, energy_weight=0.25)
    kl = (regularize_energy(u[:4]) + log_q[:4]).mean()
    assert loss.item() == pytest.approx(0.8 * 3.0 + 0.2 * kl.item())  # w_l = 1/(1+r), w_e = r/(1+r)
    assert info["reverse_kl"] == pytest.approx(kl.item()) and info["train_nll"] == 3.0
    assert info["out_of_domain"] == pytest.approx(0.2)
    # energy statistics: finite in-domain samples only (1, 2, 5000 kT)
    assert info["energy_kT"] == pytest.approx((1.0 + 2.0 + 5e3) / 3)
    assert info["energy_median_kT"] == pytest.approx(2.0)
    loss.backward()
    assert log_q.grad[4] == 0.0 and torch.allclose(log_q.grad[:4], torch.full((4,), 0.2 / 4))
    assert nll.grad.item() == pytest.approx(0.8)
    # the out-of-domain sample does not count, whatever its numbers
    moved = energy_phase_loss(nll, u, torch.tensor([0.5, -1.0, 2.0, 0.0, -1e6]), ok, 0.25)[0]
    assert moved.item() == pytest.approx(loss.item())
    # no in-domain sample: the likelihood term alone; weight 0: the NLL
    none_ok = energy_phase_loss(nll, u, log_q, torch.zeros(5, dtype=torch.bool), 0.25)
    assert none_ok[0].item() == pytest.approx(0.8 * 3.0) and np.isnan(none_ok[1]["energy_kT"])
    assert energy_phase_loss(nll, u, log_q, ok, 0.0)[0].item() == pytest.approx(3.0)


def test_likelihood_loss_is_minus_log_q_on_a_toy_generator(md_file, tmp_path):
    from bgp4.generator.train import likelihood_loss

    trainer = _tiny_trainer(md_file, tmp_path, model="rnvp")
    x = torch.as_tensor(trainer.bg.sample(16).x.detach())
    y, logdet = trainer.bg.flow_coordinates(x)
    np.testing.assert_allclose(
        likelihood_loss(trainer.bg, y, logdet).detach(), -trainer.bg.log_prob(x).detach(), rtol=1e-5, atol=1e-3
    )


def test_penalty_weight_adds_the_p4inv_bound_penalty(md_file, tmp_path):
    from bgp4.generator.train import p4inv_penalty

    trainer = _tiny_trainer(md_file, tmp_path, model="p4inv", penalty_weight=2.0, energy_steps=0)
    assert (
        trainer.loop.p4inv_layers and float(p4inv_penalty(trainer.loop.p4inv_layers).detach()) == 0.0
    )  # inside the bounds at the start
    with torch.no_grad():  # push one layer's log|det A| far above its merge bound
        layer = trainer.loop.p4inv_layers[0]
        layer.logabsdet += 100.0
    loss, info = trainer.loop.loss(None)
    assert info["p4inv_penalty"] > 0 and torch.isfinite(loss)
    assert loss.item() == pytest.approx(info["train_nll"] + 2.0 * info["p4inv_penalty"], rel=1e-5)
    with pytest.raises(InputError, match="penalty-weight"):
        TrainSettings(penalty_weight=-1.0).validated()


def test_non_finite_loss_or_gradient_skips_the_step(md_file, tmp_path):
    trainer = _tiny_trainer(md_file, tmp_path, model="p4inv")
    before = {k: v.clone() for k, v in trainer.bg.state_dict().items()}
    first = next(trainer.bg.parameters())
    nll = trainer.loop.batch_nll
    # finite loss, NaN gradient: d sqrt(x)/dx at 0 is inf, times 0
    trainer.loop.batch_nll = lambda y, ld: nll(y, ld) + torch.sqrt(first.sum() * 0.0)
    assert trainer.loop.train_step(None) is None and trainer.loop.skipped == 1
    trainer.loop.batch_nll = lambda y, ld: nll(y, ld) + float("inf")  # non-finite loss
    assert trainer.loop.train_step(None) is None and trainer.loop.skipped == 2
    after = trainer.bg.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # nothing was applied
    assert not trainer.loop.optimizer.state and trainer.loop.scheduler.steps == 0  # Adam and P4Inv did not advance
    assert all(p.grad is None for p in trainer.bg.parameters())
    trainer.loop.batch_nll = nll
    assert trainer.loop.train_step(None) is not None and trainer.loop.scheduler.steps == 1


def test_training_leaves_the_callers_random_generator_alone(md_file, tmp_path):
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    settings = TrainSettings(
        data=str(md_file),
        model="p4inv",
        merge_every=2,
        **{**TINY, "steps": 8, "energy_steps": 0, "blocks": 1, "hidden": 8},
    )
    train(settings, tmp_path / "run", progress=False)
    assert torch.equal(torch.rand(3), expected)


def test_energy_phase_learning_rate_is_constant_or_decays_over_its_own_steps():
    """--energy-lr-schedule cosine decays the energy phase's rate from --energy-lr to 1 % of it over
    --energy-steps, counted from the phase's start; constant (the default) keeps it."""
    from types import SimpleNamespace

    from bgp4.generator.loop import TrainingLoop

    settings = TrainSettings(
        model="spline", steps=100, energy_steps=50, objective="fab", energy_lr_schedule="cosine"
    ).validated()
    assert settings.energy_lr == 1e-4 and settings.lr_schedule == "cosine"

    def rate(step: int, s=settings) -> float:
        return TrainingLoop.learning_rate(SimpleNamespace(s=s, step=step, phase="ml" if step < s.steps else "energy"))

    assert rate(0) == pytest.approx(1e-3) and rate(99) == pytest.approx(1e-5, rel=0.03)
    assert (
        rate(100) == pytest.approx(1e-4) and rate(125) == pytest.approx(0.505e-4) and rate(150) == pytest.approx(1e-6)
    )
    constant = replace(settings, energy_lr_schedule="constant")
    assert rate(125, constant) == rate(150, constant) == pytest.approx(1e-4)
    with pytest.raises(InputError, match=r"--energy-lr-schedule\) must be one of constant, cosine"):
        TrainSettings(objective="fab", energy_lr_schedule="step").validated()


def test_weight_decay_shrinks_the_weight_matrices_alone_and_only_in_the_likelihood_phase(md_file, tmp_path):
    for model in ("p4inv", "spline"):  # affine couplings (w1..w3, b1..b3, scale) and P4Inv; nn.Linear conditioners
        (tmp_path / model).mkdir()
        trainer = _tiny_trainer(md_file, tmp_path / model, model=model, weight_decay=0.5, energy_steps=0)
        loop = trainer.loop
        assert isinstance(loop.optimizer, torch.optim.AdamW)
        before = {name: p.detach().clone() for name, p in trainer.bg.named_parameters()}
        for p in trainer.bg.parameters():
            p.grad = torch.zeros_like(p)  # Adam's own update is then 0: what moves is the decay alone
        loop.optimizer.step()
        shrink = 1.0 - TrainSettings().lr * 0.5
        leaves, decayed = set(), set()
        for name, p in trainer.bg.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            matrix = leaf in ("weight", "w1", "w2", "w3")
            torch.testing.assert_close(p.detach(), before[name] * shrink if matrix else before[name], msg=name)
            leaves, decayed = leaves | {leaf}, decayed | ({leaf} if matrix else set())
        assert decayed == ({"w1", "w2", "w3"} if model == "p4inv" else {"weight"})
        assert leaves - decayed >= ({"b1", "b2", "b3", "scale", "u", "v"} if model == "p4inv" else {"bias"})
    loop.step = loop.s.steps  # the energy phase
    loop.make_optimizer()
    assert type(loop.optimizer) is torch.optim.Adam  # the energy phase keeps plain Adam
    (tmp_path / "plain").mkdir()
    assert type(_tiny_trainer(md_file, tmp_path / "plain").loop.optimizer) is torch.optim.Adam
    for bad in (-0.1, 1000.0, float("nan")):
        with pytest.raises(InputError, match=r"weight_decay \(--weight-decay\)"):
            TrainSettings(weight_decay=bad).validated()
    assert TrainSettings(weight_decay=50.0).validated().weight_decay == 50.0
    assert TrainSettings(weight_decay=3.0, steps=0, objective="kl").validated().weight_decay == 0.0  # no ML phase
