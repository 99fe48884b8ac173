"""Annealed importance sampling: exactness on toy targets with known normalizers, resampling, resume, bad settings."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp, softmax

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
