"""Annealed importance sampling: exactness on toy targets with known normalizers, the CLI's guards."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp, softmax
from typer.testing import CliRunner

from bgp4.analysis.weights import lineage_ess, reverse_ess
from bgp4.errors import InputError
from bgp4.generator.refine import (
    Chains,
    FunctionTarget,
    _hmc_step,
    anneal_target,
    run_levels,
    schedule,
    start,
)
from bgp4.settings import RefineSettings

LOG_Z = math.log(5.0)  # the toy target's normalizer
MEANS = torch.tensor([[-2.0, 0.0], [2.0, 0.0]], dtype=torch.float64)
MIX, SIGMA = torch.tensor([0.3, 0.7], dtype=torch.float64), 0.5
P_RIGHT = float(0.3 * 0.5 * math.erfc(4 / math.sqrt(2)) + 0.7 * (1 - 0.5 * math.erfc(4 / math.sqrt(2))))


def _well_log_target(z):
    d = ((z[:, None, :] - MEANS) ** 2).sum(-1) / SIGMA**2
    return torch.logsumexp(torch.log(MIX) - 0.5 * d - math.log(2 * math.pi * SIGMA**2), 1) + LOG_Z


def _normal_log_prob(z):
    return -0.5 * z.square().sum(1) - math.log(2 * math.pi)


def _normal(n, g):
    return torch.randn(n, 2, generator=g, dtype=torch.float64)


def _double_well() -> FunctionTarget:
    """Two narrow Gaussians (weights 0.3 / 0.7 at x = -2 / +2, sd 0.5) times 5; base N(0, I): a poor proposal."""
    return FunctionTarget(2, _normal_log_prob, _well_log_target, _normal)


def _bootstrap(stat, log_w: torch.Tensor, rounds: int = 400, seed: int = 0) -> tuple[float, float]:
    """99 % bootstrap interval of stat(log_w[idx], idx) over resamples idx (rounds, n) of the samples."""
    idx = np.random.default_rng(seed).integers(0, len(log_w), (rounds, len(log_w)))
    values = stat(log_w.numpy()[idx], idx)
    return float(np.quantile(values, 0.005)), float(np.quantile(values, 0.995))


def _log_z(lw: np.ndarray, idx=None) -> np.ndarray:
    """log of the mean weight along the last axis: the AIS estimate of log Z."""
    return logsumexp(lw, axis=-1) - math.log(lw.shape[-1])


# Toy batches are tiny: torch's thread wake-ups would cost more than the arithmetic.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def annealed():
    target = _double_well()
    return {k: anneal_target(target, 4000, k, steps=2, seed=3, pilot=300, independence=0) for k in (0, 5, 20)}


def test_log_normalizer_and_population_match_exact_values(annealed):
    chains, _, _ = annealed[20]
    lo, hi = _bootstrap(_log_z, chains.log_w)
    assert lo <= LOG_Z <= hi
    right = (chains.z[:, 0] > 0).numpy()
    lo, hi = _bootstrap(lambda lw, i: (softmax(lw, axis=-1) * right[i]).sum(-1), chains.log_w)
    assert lo <= P_RIGHT <= hi
    assert hi - lo < 0.05  # an informative interval, not a vacuous one


def test_independence_moves_keep_the_weights_exact():
    target = _double_well()
    # independence moves alone (no MALA): the kernel itself must leave every g_b invariant
    chains, _, _ = anneal_target(target, 4000, 10, steps=0, seed=4, pilot=300, independence=2)
    assert chains.n_evals == 4000 * (1 + 2 * 10)  # one base evaluation, then one per proposal
    assert chains.grad_ratio is None and chains.grad_base is None  # no HMC moves: no gradient is taken
    with pytest.raises(ValueError, match="keep no gradients"):
        _hmc_step(target, chains, 1.0, 0.1, 1, torch.Generator().manual_seed(0))
    rates = chains.independence_acceptance
    assert np.all((rates > 0.0) & (rates < 1.0)) and rates[0] > rates[-1]  # fresh draws fit g_b less as b grows
    lo, hi = _bootstrap(_log_z, chains.log_w)
    assert lo <= LOG_Z <= hi
    right = (chains.z[:, 0] > 0).numpy()
    lo, hi = _bootstrap(lambda lw, i: (softmax(lw, axis=-1) * right[i]).sum(-1), chains.log_w)
    assert lo <= P_RIGHT <= hi and hi - lo < 0.1  # wider than with MALA: this base fits the wells poorly


def test_ess_rises_with_levels_and_counts_evaluations(annealed):
    ess = [reverse_ess(annealed[k][0].log_w) for k in (0, 5, 20)]
    assert ess[0] < 0.15 and ess[0] < ess[1] < ess[2]
    for k in (0, 5, 20):
        chains, plan, _ = annealed[k]
        assert chains.n_evals == 4000 * (1 + 2 * k)  # one base evaluation, then one per MALA move
        assert len(plan.step_sizes) == k and np.all(np.isfinite(chains.acceptance))
        assert np.all((chains.acceptance > 0.3) & (chains.acceptance < 0.95))  # tuned on the pilot


def test_zero_levels_give_the_raw_weights_exactly(annealed):
    chains, _, raw = annealed[0]
    assert torch.equal(chains.log_w, raw)
    target = _double_well()
    z = chains.z
    assert torch.equal(raw, target.evaluate(z, grad=False).log_ratio)


def test_smc_resampling_keeps_the_normalizer_unbiased():
    target = _double_well()
    chains, _, _ = anneal_target(target, 4000, 10, steps=2, seed=5, pilot=300, resample_ess=0.9)
    assert chains.resampled.any()
    lo, hi = _bootstrap(_log_z, chains.log_w)
    # after a resampling every weight is the mean: the spread left is from the later levels only
    assert lo <= LOG_Z <= hi
    # copies share their lineage, so counting each lineage once gives a lower ESS than Kish's
    lineages = chains.ancestor.unique()
    assert 0 < lineages.numel() < 4000 and int(lineages.min()) >= 0 and int(lineages.max()) < 4000
    assert lineage_ess(chains.log_w.numpy(), chains.ancestor.numpy()) < 0.9 * reverse_ess(chains.log_w)


def test_two_resamplings_compose_lineages():
    # reorder takes rows of the current state, so after i1 then i2 row j descends from i1[i2[j]]
    target = _double_well()
    chains = start(target, target.sample_base(6, generator=torch.Generator().manual_seed(0)), levels=2)
    z0 = chains.z.clone()
    i1, i2 = torch.tensor([3, 3, 0, 5, 1, 1]), torch.tensor([1, 4, 4, 0, 2, 2])
    chains.reorder(i1)
    chains.reorder(i2)
    assert torch.equal(chains.ancestor, i1[i2])
    assert torch.equal(chains.z, z0[i1][i2])
    assert torch.equal(chains.log_ratio, target.evaluate(z0[i1][i2], grad=False).log_ratio)


def test_lineage_ess_counts_copies_once_and_equals_kish_without_resampling(annealed):
    # four equal weights in two lineages of two copies: lineage sums (2, 2), ESS 16 / 8 / 4
    assert lineage_ess(np.zeros(4), np.array([0, 0, 1, 1])) == pytest.approx(0.5)
    assert lineage_ess(np.array([0.0, -np.inf]), np.array([0, 1])) == pytest.approx(0.5)
    chains = annealed[20][0]
    assert torch.equal(chains.ancestor, torch.arange(4000))
    assert lineage_ess(chains.log_w.numpy(), chains.ancestor.numpy()) == pytest.approx(
        reverse_ess(chains.log_w), rel=1e-12
    )


def test_circular_dimensions_stay_wrapped_and_von_mises_normalizer_is_found():
    kappa, mu = 4.0, 3.0  # a mode near the seam at pi

    def log_base(z):
        return torch.full((len(z),), -math.log(2 * math.pi), dtype=z.dtype) + 0.0 * z.sum(1)

    target = FunctionTarget(
        1,
        log_base,
        lambda z: kappa * torch.cos(z[:, 0] - mu),
        lambda n, g: (torch.rand(n, 1, generator=g, dtype=torch.float64) * 2 - 1) * math.pi,
        circular=torch.tensor([True]),
    )
    chains, _, _ = anneal_target(target, 4000, 8, steps=2, seed=1, pilot=300)
    assert bool(((chains.z >= -math.pi) & (chains.z < math.pi)).all())
    exact = math.log(2 * math.pi * float(torch.special.i0(torch.tensor(kappa))))
    lo, hi = _bootstrap(_log_z, chains.log_w)
    assert lo <= exact <= hi


def test_infinite_target_weighs_zero_and_never_moves():
    def log_target(z):  # -inf (an infinite energy) on the left half-plane
        return torch.where(z[:, 0] < 0, torch.full_like(z[:, 0], -math.inf), -0.5 * z.square().sum(1))

    target = FunctionTarget(
        2,
        lambda z: -0.5 * z.square().sum(1),
        log_target,
        lambda n, g: torch.randn(n, 2, generator=g, dtype=torch.float64),
    )
    z0 = torch.randn(500, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    chains, _, _ = anneal_target(target, 500, 4, steps=2, seed=0, pilot=100, z0=z0.clone(), independence=1)
    dead = z0[:, 0] < 0
    assert torch.all(torch.isneginf(chains.log_w[dead])) and torch.equal(chains.z[dead], z0[dead])
    assert torch.all(torch.isfinite(chains.log_w[~dead])) and bool((chains.z[~dead, 0] >= 0).all())
    assert chains.n_evals == 500 + 4 * (1 + 2) * int((~dead).sum())  # dead samples cost nothing


def test_plus_infinite_target_is_a_failed_evaluation_with_or_without_gradients():
    # log pi = +inf (an energy of -inf) must weigh zero, not take every other sample's weight
    def log_target(z):
        return torch.where(z[:, 0] < 0, torch.full_like(z[:, 0], math.inf), -0.5 * z.square().sum(1))

    target = FunctionTarget(
        2,
        lambda z: -0.5 * z.square().sum(1),
        log_target,
        lambda n, g: torch.randn(n, 2, generator=g, dtype=torch.float64),
    )
    z0 = torch.randn(400, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    dead = z0[:, 0] < 0
    for grad in (True, False):
        assert torch.all(torch.isneginf(target.evaluate(z0, grad=grad).log_ratio[dead]))
    chains, _, _ = anneal_target(target, 400, 3, steps=0, seed=0, z0=z0.clone())
    assert torch.all(torch.isneginf(chains.log_w[dead])) and torch.all(torch.isfinite(chains.log_w[~dead]))
    assert 0 < reverse_ess(chains.log_w) < 1
    # resampling draws from the live samples only
    chains, _, _ = anneal_target(target, 400, 3, steps=0, seed=0, z0=z0.clone(), resample_ess=0.9)
    assert chains.resampled.any() and torch.all(torch.isfinite(chains.log_w)) and bool((chains.z[:, 0] >= 0).all())


def test_evaluation_in_slices_of_rows_equals_the_whole_batch(monkeypatch):
    # a batch is evaluated ROWS rows at a time (bounded memory); values, gradients and failed
    # evaluations are those of the whole batch at once
    import bgp4.generator.rows as rows

    calls = []

    def log_target(z):
        calls.append(len(z))
        return torch.where(z[:, 0] < -1, torch.full_like(z[:, 0], math.inf), _well_log_target(z))

    target = FunctionTarget(2, _normal_log_prob, log_target, _normal)
    z = torch.randn(300, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    for grad in (True, False):
        whole = target.evaluate(z, grad=grad)
        monkeypatch.setattr(rows, "ROWS", 64)
        calls.clear()
        sliced = target.evaluate(z, grad=grad)
        monkeypatch.undo()
        assert calls == [64, 64, 64, 64, 44]  # the slices reached the target
        assert whole.log_ratio.isneginf().any() and len(sliced.log_ratio) == 300
        for a, b in zip(whole[:4], sliced[:4]):
            assert (a is None and b is None and not grad) or torch.equal(a, b)


def test_by_rows_joins_tensors_named_tuples_nones_and_dicts():
    from bgp4.generator.rows import by_rows
    from bgp4.generator.targets import Evaluation

    def evaluation(z):
        return Evaluation(z.sum(1), 2 * z[:, 0], None, z.clone(), {"u": z[:, 1], "ok": z[:, 0] > 0})

    z = torch.randn(1000, 3, generator=torch.Generator().manual_seed(0))
    whole, sliced = evaluation(z), by_rows(evaluation, z, rows=300)
    assert type(sliced) is Evaluation and sliced.grad_base is None
    assert torch.equal(sliced.log_base, whole.log_base) and torch.equal(sliced.grad_ratio, whole.grad_ratio)
    assert sliced.aux.keys() == whole.aux.keys() and all(torch.equal(sliced.aux[k], whole.aux[k]) for k in whole.aux)
    assert torch.equal(by_rows(lambda t: (t[:, 0], t[:, 1]), z, rows=7)[1], z[:, 1])
    with pytest.raises(TypeError, match="cannot join"):
        by_rows(lambda t: float(t.sum()), z, rows=300)
    with pytest.raises(TypeError, match="same structure"):
        by_rows(lambda t: None if len(t) == 300 else t, z, rows=300)
    with pytest.raises(ValueError, match="at least 1"):
        by_rows(evaluation, z, rows=0)


def test_resume_from_a_saved_level_is_exact():
    target = _double_well()
    betas, sizes = schedule(6), np.full(6, 1.0)

    def fresh():
        gen = torch.Generator().manual_seed(9)
        return start(target, target.sample_base(300, generator=gen), 6), gen

    whole, gen = fresh()
    run_levels(target, whole, betas, sizes, 2, 1, gen, resample_ess=0.8, independence=1)

    class Killed(Exception):
        pass

    saved = {}

    def save_then_die(c):
        saved.update(c.state_dict(), rng=gen2.get_state().numpy())
        if c.level == 3:
            raise Killed

    part, gen2 = fresh()
    with pytest.raises(Killed):
        run_levels(target, part, betas, sizes, 2, 1, gen2, resample_ess=0.8, on_level=save_then_die, independence=1)
    resumed = Chains.from_state({k: v.copy() for k, v in saved.items()})
    gen3 = torch.Generator()
    gen3.set_state(torch.from_numpy(saved["rng"]))
    run_levels(target, resumed, betas, sizes, 2, 1, gen3, resample_ess=0.8, independence=1)
    assert resumed.level == whole.level == 6 and resumed.n_evals == whole.n_evals
    assert torch.equal(resumed.log_w, whole.log_w) and torch.equal(resumed.z, whole.z)
    assert torch.equal(resumed.ancestor, whole.ancestor)


def test_bad_settings_are_refused():
    target = _double_well()
    with pytest.raises(InputError):
        anneal_target(target, 10, -1)
    with pytest.raises(InputError):
        anneal_target(target, 10, 2, steps=0, independence=0)
    with pytest.raises(InputError):
        anneal_target(target, 10, 2, resample_ess=1.5)
    with pytest.raises(InputError):
        anneal_target(target, 10, 2, independence=-1)
    for power in (0.0, 11.0):  # the library call and the settings record refuse the same schedules
        with pytest.raises(InputError, match="schedule power must be in"):
            anneal_target(target, 10, 2, power=power)
        with pytest.raises(InputError, match="schedule power must be in"):
            RefineSettings(levels=2, power=power).validated()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--refine", "-1"], "--refine"),
        (["--refine", "3", "--resample-ess", "2"], "--resample-ess"),
        (["--refine", "3", "--refine-steps", "0", "--refine-independence", "0"], "both 0"),
        (["--refine", "3", "--refine-independence", "-1"], "--refine-independence"),
        (["--refine", "3"], "no finished training run"),
    ],
)
def test_cli_bad_input_is_one_line_and_touches_nothing(tmp_path, args, message):
    from bgp4.cli import app

    run = tmp_path / "run"
    run.mkdir()
    (run / "settings.json").write_text(json.dumps({"model": "rnvp"}))  # a run that never finished
    before = sorted(p.name for p in run.iterdir())
    result = CliRunner().invoke(app, ["sample", str(run), "--n", "100", *args])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0]
    assert sorted(p.name for p in run.iterdir()) == before


@pytest.mark.slow
def test_molecule_path_on_a_tiny_generator(molecule, md_frames):
    from bgp4.generator.model import build_generator
    from bgp4.generator.refine import GeneratorTarget, anneal
    from bgp4.simulation.energy import OpenMMEnergy

    torch.manual_seed(0)
    bg = build_generator("rnvp", data=md_frames[0], blocks=2, hidden=16, fix_constrained=True).eval()
    for p in bg.parameters():
        p.requires_grad_(False)
    with OpenMMEnergy(molecule.system, 600.0, n_workers=1) as energy:
        result = anneal(bg, energy, 200, 3, steps=2, pilot=50, seed=0)  # and one independence move per level
        assert result.n_evals == 200 * (1 + 3 * (2 + 1)) + 50 * (1 + 3 * (3 + 1))
        assert result.x.shape == (200, 22, 3) and np.all(np.isfinite(result.acceptance))
        live = torch.isfinite(result.log_w)
        assert live.any()
        # the final samples' cached energies are those of their positions
        u = energy.reduced_energy(result.x[live][:20].double())
        assert torch.allclose(u, result.u[live][:20], rtol=1e-4, atol=1e-3)
        zero = anneal(bg, energy, 100, 0, seed=1)
        direct = GeneratorTarget(bg, energy).evaluate(zero.z, grad=False)
        assert torch.equal(zero.log_w, zero.raw_log_w) and torch.equal(zero.log_w, direct.log_ratio)
        # in slices of rows (bounded memory), with forces and the flow's backward pass: the same values
        import bgp4.generator.rows as rows

        whole = GeneratorTarget(bg, energy).evaluate(zero.z, grad=True)
        saved, rows.ROWS = rows.ROWS, 32
        try:
            sliced = GeneratorTarget(bg, energy).evaluate(zero.z, grad=True)
        finally:
            rows.ROWS = saved
        live = torch.isfinite(whole.log_ratio)
        assert torch.equal(torch.isfinite(sliced.log_ratio), live) and torch.equal(sliced.aux["ok"], whole.aux["ok"])
        for a, b in [(sliced.log_ratio[live], whole.log_ratio[live]), (sliced.grad_ratio, whole.grad_ratio)]:
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from bgp4.generator.train import TrainSettings, train
    from bgp4.simulation.md import MDSettings, simulate

    root = tmp_path_factory.mktemp("refine")
    data = root / "ala2.h5"
    simulate(data, MDSettings(frames=2000, equilibration_ps=2.0, replicas=2, seed=5), progress=False)
    run = root / "rnvp"
    train(
        TrainSettings(
            data=str(data),
            model="rnvp",
            blocks=2,
            hidden=16,
            batch=64,
            steps=60,
            energy_steps=0,
            eval_every=30,
            workers=1,
            fix_constrained=True,
        ),
        run,
        progress=False,
    )
    return data, run


@pytest.mark.slow
def test_cli_refine_zero_reproduces_raw_weights_and_analyze_lists_both(tiny_run, tmp_path):
    from bgp4.cli import app
    from bgp4.generator.sample import SAMPLE_EXTRAS
    from bgp4.simulation.data import load_trajectory

    data, run = tiny_run
    result = CliRunner().invoke(
        app, ["sample", str(run), "--n", "300", "--batch", "120", "--workers", "1", "--refine", "0", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    raw = load_trajectory(run / "samples.h5", 22, extras=SAMPLE_EXTRAS)
    refined = load_trajectory(run / "samples-refined.h5", 22, extras=SAMPLE_EXTRAS)
    assert np.array_equal(raw.extras["log_w"], refined.extras["log_w"])
    assert np.array_equal(raw.xyz, refined.xyz)
    assert refined.settings["energy_evals"] == 300 and refined.settings["acceptance"] == []
    report = tmp_path / "report"
    result = CliRunner().invoke(app, ["analyze", str(run), "--data", str(data), "--out", str(report), "--workers", "1"])
    assert result.exit_code == 0, result.output
    models = json.loads((report / "metrics.json").read_text())["models"]
    assert set(models) == {"rnvp", "rnvp +AIS(0)"}
    # the same weights (the two files' log w are equal above), equal to rounding
    assert models["rnvp"]["reverse_ess"] == pytest.approx(models["rnvp +AIS(0)"]["reverse_ess"], rel=1e-6)
    assert "energy evaluations per sample" in (report / "report.md").read_text()


@pytest.mark.slow
def test_cli_smc_keeps_lineages_and_analyze_reports_their_ess(tiny_run, tmp_path):
    import shutil

    from bgp4.cli import app
    from bgp4.generator.sample import REFINED_EXTRAS
    from bgp4.simulation.data import load_trajectory

    data, shared = tiny_run
    run = shutil.copytree(shared, tmp_path / "rnvp", ignore=shutil.ignore_patterns("samples*"))
    result = CliRunner().invoke(
        app,
        [
            "sample",
            str(run),
            "--n",
            "300",
            "--batch",
            "150",
            "--workers",
            "1",
            "--refine",
            "3",
            "--resample-ess",
            "1",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    refined = load_trajectory(run / "samples-refined.h5", 22, extras=REFINED_EXTRAS)
    ancestor = refined.extras["ancestor"]
    assert refined.settings["resampled_levels"] > 0
    # lineages are numbered across the two batches: each batch's copies descend from its own samples
    assert set(ancestor[:150]) <= set(range(150)) and set(ancestor[150:]) <= set(range(150, 300))
    assert len(set(ancestor)) < 300
    summary = json.loads(refined.settings["summary"])
    assert summary["lineages"] == len(set(ancestor)) and summary["lineage_ess"] <= summary["reverse_ess"]
    report = tmp_path / "report"
    result = CliRunner().invoke(app, ["analyze", str(run), "--data", str(data), "--out", str(report), "--workers", "1"])
    assert result.exit_code == 0, result.output
    models = json.loads((report / "metrics.json").read_text())["models"]
    assert "reverse_ess_lineage" not in models["rnvp"]
    assert models["rnvp +AIS(3)"]["reverse_ess_lineage"] == pytest.approx(summary["lineage_ess"], rel=1e-6)
    assert "reverse ESS by SMC lineage" in (report / "report.md").read_text()


@pytest.mark.slow
def test_killed_refinement_resumes_to_the_same_file(tiny_run, tmp_path, monkeypatch):
    import bgp4.generator.refine as refine_module
    from bgp4.generator.sample import SAMPLE_EXTRAS, RefineSettings, SampleSettings, refine_run, sample_run
    from bgp4.simulation.data import load_trajectory

    _, run = tiny_run
    s, r = SampleSettings(n=200, batch=100, workers=1), RefineSettings(levels=3, steps=1, pilot=50)
    outs = {}
    for name in ("whole", "resumed"):
        out = tmp_path / name / "samples.h5"
        sample_run(run, s, out, progress=False)
        if name == "resumed":
            calls, step = [0], refine_module._hmc_step

            def dies_in_batch_two(*args):
                calls[0] += 1
                if calls[0] == 3 * 3 + 3 + 2:  # pilot: 3 levels x 3 moves; batch 1: 3; then into batch 2
                    raise KeyboardInterrupt
                return step(*args)

            monkeypatch.setattr(refine_module, "_hmc_step", dies_in_batch_two)
            with pytest.raises(KeyboardInterrupt):
                refine_run(run, s, r, out, progress=False)
            state = sorted(p.name for p in (tmp_path / name / "samples-refined.state").iterdir())
            assert state == ["batch-00000.npz", "batch-00001.npz", "plan.json"]
            monkeypatch.setattr(refine_module, "_hmc_step", step)
        summary, fresh = refine_run(run, s, r, out, progress=False)
        assert fresh and not (tmp_path / name / "samples-refined.state").exists()
        outs[name] = load_trajectory(tmp_path / name / "samples-refined.h5", 22, extras=SAMPLE_EXTRAS)
    a, b = outs["whole"], outs["resumed"]
    assert np.array_equal(a.extras["log_w"], b.extras["log_w"]) and np.array_equal(a.xyz, b.xyz)
    # per level: one independence move (the default), then one MALA move; the pilot makes three
    assert a.settings["energy_evals"] == b.settings["energy_evals"] == 50 * (1 + 3 * 4) + 200 * (1 + 3 * 2)
    assert len(a.settings["independence_acceptance"]) == 3
    assert len(a.settings["acceptance"]) == 3 and summary["evals_per_sample"] == pytest.approx(
        a.settings["evals_per_sample"]
    )


@pytest.mark.slow
def test_cli_refinement_by_independence_moves_alone(tiny_run, tmp_path):
    """--refine-steps 0: no pilot, no gradients, one energy evaluation per sample and level."""
    import shutil

    from bgp4.cli import app
    from bgp4.generator.sample import REFINED_EXTRAS
    from bgp4.simulation.data import load_trajectory

    _, shared = tiny_run
    run = shutil.copytree(shared, tmp_path / "rnvp", ignore=shutil.ignore_patterns("samples*"))
    result = CliRunner().invoke(
        app, ["sample", str(run), "--n", "200", "--workers", "1", "--refine", "4", "--refine-steps", "0", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    settings = load_trajectory(run / "samples-refined.h5", 22, extras=REFINED_EXTRAS).settings
    assert settings["pilot_evals"] == 0 and settings["energy_evals"] == 200 * (1 + 4)
    assert np.all(np.isnan(settings["acceptance"])) and np.all(np.isfinite(settings["independence_acceptance"]))
    rate = json.loads(settings["summary"])["final_independence_acceptance"]
    assert rate == pytest.approx(settings["independence_acceptance"][-1])


def test_refine_note_names_the_fix():
    from bgp4.generator.refine import STALLED_INDEPENDENCE
    from bgp4.generator.refine import refine_note as _refine_note

    fine = {"reverse_ess": 0.9, "final_independence_acceptance": 0.6}
    assert _refine_note(0.5, fine, steps=0) is None and _refine_note(None, fine, steps=1) is None
    assert _refine_note(0.9, {"reverse_ess": 0.85}, steps=0) is None  # within noise of the raw ESS
    smc = {"reverse_ess": 0.9, "lineage_ess": 0.05}  # resampling evened the weights, the lineages collapsed
    assert "--refine-steps 1" in _refine_note(0.5, smc, steps=0)
    worse = {"reverse_ess": 0.002, "final_independence_acceptance": 0.6}
    assert "--refine-steps 1" in _refine_note(0.17, worse, steps=0)
    assert "more levels" in _refine_note(0.17, worse, steps=1)
    stalled = {"reverse_ess": 0.6, "final_independence_acceptance": STALLED_INDEPENDENCE / 2}
    assert "accepted in only" in _refine_note(0.5, stalled, steps=0) and _refine_note(0.5, stalled, steps=1) is None


def test_the_pipeline_shows_the_refinement_hint_as_sample_does(monkeypatch, tmp_path):
    from bgp4 import pipeline
    from bgp4.generator import sample
    from bgp4.generator.refine import STALLED_INDEPENDENCE
    from bgp4.settings import RefineSettings, SampleSettings

    stalled = {"reverse_ess": 0.6, "final_independence_acceptance": STALLED_INDEPENDENCE / 2}
    monkeypatch.setattr(sample, "refine_run", lambda run, s, r, progress, renew: (stalled, True))
    said = []
    refine = RefineSettings(levels=5, steps=0)
    pipeline._refine(tmp_path / "spline", SampleSettings(), refine, 0.5, progress=False, say=said.append)
    assert said[0].startswith("refine spline: done; AIS with 5 levels")
    assert said[1].startswith("note: the generator's own draws were accepted in only")
    said.clear()
    pipeline._refine(
        tmp_path / "spline", SampleSettings(), RefineSettings(levels=5), 0.5, progress=False, say=said.append
    )
    assert len(said) == 1  # with MALA moves the same figures need no hint
