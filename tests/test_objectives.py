"""Training with the energy on toy targets with known normalizers: AIS towards p^2/q, FAB's replay
buffer, and what FAB and reverse KL learn (ESS, modes)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from torch import nn

from bgp4.analysis.weights import reverse_ess
from bgp4.generator.fab import INITIAL_STEP, AlphaTarget, FabSampler
from bgp4.generator.losses import FAB_WEIGHT_CLIP, fab_loss, likelihood_loss, reverse_kl_loss
from bgp4.generator.model import BoltzmannGenerator, build_flow
from bgp4.generator.objectives import FabObjective, ReverseKLObjective, fab_min_buffer
from bgp4.generator.replay import ReplayBuffer
from bgp4.generator.targets import GeneratorTarget
from bgp4.settings import TrainSettings

# Toy batches are tiny: torch's thread wake-ups would cost more than the arithmetic.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Shifted(nn.Module):
    """A toy 'coordinate transform': positions x = y + shift, unit Jacobian, every y in the domain."""

    def __init__(self, dim: int, shift=None, dtype=torch.float32):
        super().__init__()
        self.n_dims = dim
        self.register_buffer("circular_mask", torch.zeros(dim, dtype=torch.bool))
        self.register_buffer(
            "shift", torch.zeros(dim, dtype=dtype) if shift is None else torch.tensor(shift, dtype=dtype)
        )

    def to_cartesian(self, y):
        return y + self.shift, y.new_zeros(len(y))

    def from_cartesian(self, x):
        x = torch.as_tensor(x)
        return x - self.shift.to(x), x.new_zeros(len(x))

    def in_domain(self, y):
        return torch.ones(len(y), dtype=torch.bool, device=y.device)


class Scaled(Shifted):
    """A toy transform with a Jacobian: x = SCALE y, so to_cartesian gives log|dx/dy| = d log SCALE
    and from_cartesian log|dy/dx| = -d log SCALE (float64)."""

    SCALE = 1.7

    def __init__(self, dim: int):
        super().__init__(dim, dtype=torch.float64)

    def to_cartesian(self, y):
        return self.SCALE * y, y.new_full((len(y),), y.shape[1] * math.log(self.SCALE))

    def from_cartesian(self, x):
        x = torch.as_tensor(x)
        return x / self.SCALE, x.new_full((len(x),), -x.shape[1] * math.log(self.SCALE))


class Mixture:
    """p(x) = sum_k pi_k N(x; mu_k, sigma^2 I), normalized: energies u = -log p in 'kT', log Z = 0."""

    def __init__(self, means, sigma: float, weights=None):
        self.means = torch.tensor(means, dtype=torch.float64)
        self.sigma = sigma
        k = len(means)
        self.log_pi = torch.log(torch.tensor(weights or [1.0 / k] * k, dtype=torch.float64))

    def log_p(self, x: torch.Tensor) -> torch.Tensor:
        x = x.double()
        d = x.shape[1]
        sq = ((x[:, None, :] - self.means) ** 2).sum(-1) / self.sigma**2
        return torch.logsumexp(self.log_pi - 0.5 * sq - d * math.log(self.sigma * math.sqrt(2 * math.pi)), 1)

    def reduced_energy(self, x: torch.Tensor) -> torch.Tensor:
        return -self.log_p(x)

    def log_z2(self) -> float:
        """log of the integral of p^2 / q for q = N(0, I): each pair of components is a product
        N(mu_j; mu_k, 2 s^2 I) N(x; m, s^2/2 I), and the integral of N(x; m, v) / N(x; 0, 1) over
        each dimension is sqrt(pi / (a v)) exp(b^2 / 4a - c), a = 1/(2v) - 1/2, b = m/v, c = m^2/(2v)."""
        mu, s2 = self.means.numpy(), self.sigma**2
        d, v = mu.shape[1], s2 / 2
        a = 1 / (2 * v) - 0.5
        terms = []
        for j in range(len(mu)):
            for k in range(len(mu)):
                sq = ((mu[j] - mu[k]) ** 2).sum()
                overlap = -sq / (4 * s2) - d / 2 * math.log(2 * math.pi * 2 * s2)
                m = (mu[j] + mu[k]) / 2
                per_dim = 0.5 * math.log(math.pi / (a * v)) + (m / v) ** 2 / (4 * a) - m**2 / (2 * v)
                terms.append(float(self.log_pi[j] + self.log_pi[k]) + overlap + per_dim.sum())
        return float(logsumexp(terms))


def _generator(dim: int, shift=None, blocks: int = 3, hidden: int = 32, identity: bool = False, seed: int = 0):
    """A BoltzmannGenerator on the toy transform: an RNVP flow, or (identity) one whose every
    parameter is zero, so that q = N(shift, I) exactly (float64)."""
    torch.manual_seed(seed)
    dtype = torch.float64 if identity else torch.float32
    flow = build_flow("rnvp", dim, blocks=1 if identity else blocks, hidden=hidden, dtype=dtype)
    if identity:
        with torch.no_grad():
            for p in flow.parameters():
                p.zero_()
    return BoltzmannGenerator(Shifted(dim, shift, dtype), flow, {"kind": "rnvp", "n_dims": dim})


def _random_generator(gain: float = 0.2, seed: int = 0) -> BoltzmannGenerator:
    """A 2-d BoltzmannGenerator far from the identity: a small float64 RNVP flow whose every
    parameter is drawn N(0, gain^2) (its log density differs from a Gaussian's by ~0.7 nats rms),
    on the `Scaled` transform."""
    torch.manual_seed(seed)
    flow = build_flow("rnvp", 2, blocks=2, hidden=16, dtype=torch.float64)
    with torch.no_grad():
        for p in flow.parameters():
            p.normal_(0.0, gain)
    return BoltzmannGenerator(Scaled(2), flow, {"kind": "rnvp", "n_dims": 2})


def _log_q_without_log_dets(bg: BoltzmannGenerator, x: torch.Tensor, h: float = 1e-5) -> torch.Tensor:
    """log q(x) (n,) of a 2-d generator from its inverse map alone: log N(z(x)) + log|det dz/dx|,
    the Jacobian by central differences, so that no log-det of the flow or transform enters."""

    def z_of(x):
        with torch.no_grad():
            return bg.flow.inverse(bg.flow_coordinates(x)[0])[0]

    jacobian = torch.stack([(z_of(x + h * e) - z_of(x - h * e)) / (2 * h) for e in torch.eye(2, dtype=x.dtype)], -1)
    z = z_of(x)
    return -0.5 * z.square().sum(1) - math.log(2 * math.pi) + torch.linalg.det(jacobian).abs().log()


def _grid_log_z2(bg: BoltzmannGenerator, p: Mixture, limit: float = 6.0, n: int = 241) -> float:
    """log of the integral of p^2/q over [-limit, limit]^2 on an n x n grid, with q from
    `_log_q_without_log_dets` (p^2/q is negligible beyond: p has sigma 0.7)."""
    t = torch.linspace(-limit, limit, n, dtype=torch.float64)
    x = torch.stack(torch.meshgrid(t, t, indexing="ij"), -1).reshape(-1, 2)
    log_f = 2 * p.log_p(x) - _log_q_without_log_dets(bg, x)
    return float(torch.logsumexp(log_f, 0)) + 2 * math.log(float(t[1] - t[0]))


def _fab_settings(**over) -> TrainSettings:
    return TrainSettings(**{"batch": 256, "fab_levels": 4, "fab_buffer": 4096, "fab_reuse": 4, **over})


def _bootstrap_log_mean(log_w: np.ndarray, rounds: int = 400, seed: int = 0) -> tuple[float, float]:
    """99 % bootstrap interval of log(mean w)."""
    idx = np.random.default_rng(seed).integers(0, len(log_w), (rounds, len(log_w)))
    values = logsumexp(log_w[idx], axis=1) - math.log(len(log_w))
    return float(np.quantile(values, 0.005)), float(np.quantile(values, 0.995))


# -- AIS towards p^2/q ---------------------------------------------------------------------------
def test_alpha_target_doubles_the_raw_log_weight_and_its_gradient():
    bg, p = _generator(2, identity=True), Mixture([[-1.0, 0.0], [1.0, 0.0]], 0.7)
    z = torch.randn(5, 2, dtype=torch.float64)
    raw, doubled = GeneratorTarget(bg, p).evaluate(z), AlphaTarget(GeneratorTarget(bg, p)).evaluate(z)
    torch.testing.assert_close(doubled.log_ratio, 2 * raw.log_ratio)
    torch.testing.assert_close(doubled.grad_ratio, 2 * raw.grad_ratio)
    torch.testing.assert_close(doubled.aux["r"], raw.log_ratio)  # the flow's own weight rides along
    # r = log p - log q, with q = N(0, I) for the zeroed flow
    log_q = -0.5 * z.square().sum(1) - math.log(2 * math.pi)
    torch.testing.assert_close(raw.log_ratio, p.log_p(z) - log_q)


@pytest.mark.slow
@pytest.mark.parametrize("power", [2.0, 1.0])
def test_ais_weights_towards_p2_over_q_are_exact(power):
    """q = N(0, I), p a two-component mixture: the mean AIS weight estimates the integral of p^2/q,
    known in closed form, on either schedule; without levels each weight is exactly (p/q)^2."""
    bg, p = _generator(2, identity=True), Mixture([[-1.0, 0.0], [1.0, 0.0]], 0.7, [0.4, 0.6])
    exact = p.log_z2()
    plain = FabSampler(0, 0, 0).run(bg, p, 2000, torch.Generator().manual_seed(1))
    x = plain.y  # flow coordinates are positions here (zero shift)
    log_q = -0.5 * x.square().sum(1) - math.log(2 * math.pi)
    torch.testing.assert_close(plain.log_w, 2 * (p.log_p(x) - log_q))
    torch.testing.assert_close(plain.log_q, log_q)
    assert plain.evaluations == 2000
    sampler = FabSampler(levels=8, moves=2, independence=1, power=power)
    np.testing.assert_allclose(sampler.betas, (np.arange(10) / 9) ** power)
    for _ in range(3):  # step sizes adapt between runs; each run's kernels are fixed: exact weights
        annealed = sampler.run(bg, p, 4000, torch.Generator().manual_seed(2))
    assert annealed.evaluations == 4000 * (1 + 8 * 3)  # every chain stays live on this target
    lo, hi = _bootstrap_log_mean(annealed.log_w.numpy())
    assert lo <= exact <= hi and hi - lo < 0.1
    assert annealed.ais_ess > plain.ais_ess  # annealing beats plain importance sampling
    assert np.all(annealed.acceptance > 0.3) and np.all(sampler.step_sizes > INITIAL_STEP)  # accepting: larger steps


@pytest.mark.slow
def test_ais_towards_p2_over_q_is_exact_through_a_flow_and_transform_with_jacobians():
    """A random RNVP flow and x = 1.7 y: the AIS estimate of the integral of p^2/q must contain
    its value on a grid, where q comes from the inverse map and a numerical Jacobian only (a sign
    error in a log-det moves it by nats), and the batch's log q must be that q at its samples."""
    bg, p = _random_generator(), Mixture([[-1.0, 0.0], [1.0, 0.0]], 0.7, [0.4, 0.6])
    exact = _grid_log_z2(bg, p)
    sampler = FabSampler(levels=8, moves=2, independence=1)
    for _ in range(3):
        batch = sampler.run(bg, p, 4000, torch.Generator().manual_seed(2))
    lo, hi = _bootstrap_log_mean(batch.log_w.numpy())
    assert lo <= exact <= hi and hi - lo < 0.2
    x = Scaled.SCALE * batch.y.double()  # the positions of the final samples
    torch.testing.assert_close(batch.log_q, _log_q_without_log_dets(bg, x), atol=2e-3, rtol=0.0)


def test_the_fab_objective_runs_its_ais_on_the_settings_schedule():
    bg = _generator(2, identity=True)
    for power in (2.0, 1.0):
        objective = FabObjective(bg, _fab_settings(fab_power=power), lambda y, ld: likelihood_loss(bg, y, ld), 0)
        np.testing.assert_allclose(objective.sampler.betas, (np.arange(6) / 5) ** power)


@pytest.mark.slow
def test_fab_hmc_moves_take_the_settings_leapfrog_steps_and_stay_exact():
    """HMC moves of 3 leapfrog steps: 3 evaluations a move, and the AIS estimate of the integral
    of p^2/q still contains its grid value."""
    bg, p = _random_generator(), Mixture([[-1.0, 0.0], [1.0, 0.0]], 0.7, [0.4, 0.6])
    objective = FabObjective(bg, _fab_settings(fab_leapfrog=3), lambda y, ld: likelihood_loss(bg, y, ld), 0)
    assert objective.sampler.leapfrog == 3
    sampler = FabSampler(levels=6, moves=1, independence=1, leapfrog=3)
    for _ in range(3):
        batch = sampler.run(bg, p, 4000, torch.Generator().manual_seed(5))
    assert batch.evaluations == 4000 * (1 + 6 * (1 + 3))  # the start, then per level one independence + 3 steps
    lo, hi = _bootstrap_log_mean(batch.log_w.numpy())
    assert lo <= _grid_log_z2(bg, p) <= hi and hi - lo < 0.2


def test_sampler_state_dict_is_a_copy_that_later_runs_leave_alone():
    bg, p = _generator(2, identity=True), Mixture([[-1.0, 0.0], [1.0, 0.0]], 0.7)
    sampler = FabSampler(levels=3, moves=1, independence=0)
    sampler.run(bg, p, 200, torch.Generator().manual_seed(0))
    state = sampler.state_dict()
    taken = state["step_sizes"].clone()
    sampler.run(bg, p, 200, torch.Generator().manual_seed(1))
    assert not np.allclose(sampler.step_sizes, taken.numpy())  # the run adapted its step sizes
    torch.testing.assert_close(state["step_sizes"], taken)  # the state taken before it did not follow
    again = FabSampler(levels=3, moves=1, independence=0)
    again.load_state_dict(state)
    assert np.array_equal(again.step_sizes, taken.numpy())


# -- the replay buffer -------------------------------------------------------------------------
def test_buffer_draws_in_proportion_to_weights_and_keeps_the_newest():
    buffer = ReplayBuffer(capacity=4, dim=1, min_size=2)
    ones = torch.ones(3)
    buffer.add(torch.zeros(3, 1), ones, torch.log(torch.tensor([1.0, 2.0, 7.0])).double(), ones)
    gen = torch.Generator().manual_seed(0)
    counts = np.bincount([int(buffer.draw(1, gen)) for _ in range(20_000)], minlength=3)
    np.testing.assert_allclose(counts / counts.sum(), [0.1, 0.2, 0.7], atol=0.012)
    assert sorted(buffer.draw(3, gen).tolist()) == [0, 1, 2]  # a batch holds distinct samples
    # zero weights never enter; the ring overwrites the oldest
    buffer.add(torch.full((3, 1), 5.0), ones, torch.tensor([0.0, -math.inf, 1.0]).double(), ones)
    assert buffer.size == 4 and buffer.added == 5 and buffer.cursor == 1
    assert buffer.y[:, 0].tolist() == [5.0, 0.0, 0.0, 5.0]
    with pytest.raises(ValueError, match="too few"):
        buffer.draw(5, gen)


def test_buffer_weight_adjustment_equals_a_recomputation_from_scratch():
    """After FAB updates, each stored sample's log weight is its AIS log weight plus
    log q_insert(x) - log q_last(x), and its log q_old is log q_last(x): q_insert is the flow when
    the sample was added and q_last the flow when it was last drawn (q_insert if never), both
    recomputed from snapshots of the flow's parameters. A buffer that never adjusted would keep
    the AIS weights and fail on every drawn row."""
    import copy

    bg, p = _generator(2, shift=[-1.5, 0.0]), Mixture([[-2.0, 0.0], [2.0, 0.0]], 0.5)
    objective = FabObjective(
        bg, _fab_settings(batch=64, fab_buffer=256, fab_reuse=2), lambda y, ld: likelihood_loss(bg, y, ld), 0
    )
    buffer, snapshots = objective.buffer, []  # the flow's state_dict at each add and each adjust
    ais_log_w = torch.full((buffer.capacity,), torch.nan, dtype=torch.float64)
    inserted, last = torch.zeros(buffer.capacity, dtype=torch.long), torch.zeros(buffer.capacity, dtype=torch.long)
    add, adjust = buffer.add, buffer.adjust

    def recording_add(y, logdet, log_w, log_q):
        before = buffer.added
        add(y, logdet, log_w, log_q)
        rows = torch.arange(before, buffer.added) % buffer.capacity
        snapshots.append(copy.deepcopy(bg.state_dict()))
        ais_log_w[rows] = buffer.log_w[rows]
        inserted[rows] = last[rows] = len(snapshots) - 1

    def recording_adjust(idx, log_q):
        adjust(idx, log_q)
        snapshots.append(copy.deepcopy(bg.state_dict()))  # the parameters that gave log_q
        last[idx] = len(snapshots) - 1

    buffer.add, buffer.adjust = recording_add, recording_adjust
    optimizer = torch.optim.Adam(bg.parameters(), lr=1e-2)
    for _ in range(12):
        optimizer.zero_grad()
        loss, _, _ = objective.loss(p)
        loss.backward()
        optimizer.step()
    assert buffer.size == 256 and buffer.added == 6 * 64  # the ring wrapped
    y, logdet = buffer.y[: buffer.size], buffer.logdet[: buffer.size]
    then = copy.deepcopy(bg)
    with torch.no_grad():
        log_q = []  # (n_snapshots, size): each snapshot's log density of every stored sample
        for state in snapshots:
            then.load_state_dict(state)
            log_q.append(-likelihood_loss(then, y, logdet).double())
        log_q, rows = torch.stack(log_q), torch.arange(buffer.size)
        log_q_insert, log_q_last = log_q[inserted, rows], log_q[last, rows]
        torch.testing.assert_close(buffer.log_q_old[: buffer.size], log_q_last, rtol=0, atol=1e-4)
        expected = ais_log_w + log_q_insert - log_q_last
        torch.testing.assert_close(buffer.log_w[: buffer.size], expected, rtol=0, atol=1e-4)
        drawn = last != inserted
        assert drawn.sum() > 64  # most rows were drawn since they were added: the check is not vacuous
        assert (buffer.log_w[drawn] - ais_log_w[drawn]).abs().max() > 1e-2  # and their weights moved
        # the weight towards p^2/q of the current flow is the same whichever way it is kept
        torch.testing.assert_close(
            buffer.current_log_w(log_q[-1]), ais_log_w + log_q_insert - log_q[-1], rtol=0, atol=1e-4
        )


def test_fab_loss_reweights_by_the_density_change_and_clips():
    nll = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    log_q_old = torch.tensor([-1.0, -2.0 + math.log(3.0), 0.0], dtype=torch.float64)
    loss, log_adjust = fab_loss(nll, log_q_old)
    torch.testing.assert_close(log_adjust, torch.tensor([0.0, math.log(3.0), 3.0], dtype=torch.float64))
    # -mean(w log q) with w = 1, 3 and e^3 clipped to FAB_WEIGHT_CLIP
    expected = (1 * 1.0 + 3 * 2.0 + FAB_WEIGHT_CLIP * 3.0) / 3
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-6)
    loss.backward()
    torch.testing.assert_close(nll.grad, torch.tensor([1.0, 3.0, FAB_WEIGHT_CLIP]) / 3)
    assert fab_min_buffer(50_000, 256) == 6_250 and fab_min_buffer(300, 256) == 256


def test_reverse_kl_loss_leaves_out_of_domain_samples_and_regularizes_clashes():
    log_q = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    u = torch.tensor([3.0, 1e6, float("inf")], dtype=torch.float64)
    kl, info = reverse_kl_loss(u, log_q, torch.tensor([True, True, False]))
    assert float(kl.detach()) == pytest.approx((3.0 + 0.5 + 1e3 + math.log1p(1e6 - 1e3) - 1.0) / 2)
    assert info["out_of_domain"] == pytest.approx(1 / 3) and 0 < info["batch_ess"] < 1
    none, _ = reverse_kl_loss(u, log_q, torch.zeros(3, dtype=torch.bool))
    none.backward()  # no in-domain sample: a zero loss that still steps
    assert float(none.detach()) == 0.0 and torch.equal(log_q.grad, torch.zeros(3))


# -- what each objective learns ----------------------------------------------------------------
def _fit(objective, bg, p, steps: int, lr: float = 3e-3) -> int:
    optimizer = torch.optim.Adam(bg.parameters(), lr=lr)
    evaluations = 0
    for _ in range(steps):
        optimizer.zero_grad()
        loss, _, spent = objective.loss(p)
        evaluations += spent
        loss.backward()
        torch.nn.utils.clip_grad_norm_(bg.parameters(), 10.0)
        optimizer.step()
    return evaluations


def _flow_figures(bg, p, n: int = 8000) -> dict[str, float]:
    """Reverse ESS, log of the mean weight (log of the share of p that q covers; 0 when all) and
    the share of q's samples in the right mode."""
    with torch.no_grad():
        s = bg.sample(n, generator=torch.Generator().manual_seed(123))
        log_w = (p.log_p(s.x) - s.log_q.double()).numpy()
    return {
        "ess": reverse_ess(log_w),
        "log_mean_w": float(logsumexp(log_w) - math.log(n)),
        "right": float((s.x[:, 0] > 0).float().mean()),
    }


@pytest.mark.slow
def test_fab_and_reverse_kl_raise_the_ess_and_only_fab_finds_both_modes():
    """Two equal modes at x = -2 and +2 (sd 0.5); the flow starts as N((-1.5, 0), I), near the left
    one. Both objectives drive the reverse ESS towards 1; reverse KL settles on the left mode alone
    (its weights are then nearly constant: a high ESS that cannot see the missing half), while
    FAB's p^2/q samples find the right one and the flow covers both."""
    p = Mixture([[-2.0, 0.0], [2.0, 0.0]], 0.5)
    start = _flow_figures(_generator(2, shift=[-1.5, 0.0]), p)
    assert start["ess"] < 0.1 and start["right"] < 0.1

    kl_bg = _generator(2, shift=[-1.5, 0.0])
    _fit(ReverseKLObjective(kl_bg, 256, torch.Generator().manual_seed(2)), kl_bg, p, 300)
    kl = _flow_figures(kl_bg, p)
    fab_bg = _generator(2, shift=[-1.5, 0.0])
    fab = FabObjective(fab_bg, _fab_settings(), lambda y, ld: likelihood_loss(fab_bg, y, ld), 0)
    evaluations = _fit(fab, fab_bg, p, 300)
    fab = _flow_figures(fab_bg, p)

    assert kl["ess"] > 0.9 and fab["ess"] > 0.7
    assert kl["right"] < 0.01 and kl["log_mean_w"] == pytest.approx(math.log(0.5), abs=0.05)  # half of p missed
    assert 0.4 < fab["right"] < 0.6 and abs(fab["log_mean_w"]) < 0.05  # all of p covered
    # two AIS batches fill the buffer to an eighth (512), then one per 4 steps; 1 + K (1 + 1) evaluations each
    assert evaluations == (1 + 300 // 4) * 256 * (1 + 4 * 2)
