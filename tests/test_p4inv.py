"""P4Inv layer and scheduler: exact inverse / log-det tracking, merge rules, correction, Adam resets."""

from __future__ import annotations

import pytest
import torch
from _scripts import load_script

from bgp4.errors import InputError
from bgp4.flows.p4inv import MergeResult, P4InvLinear, P4InvScheduler

F64 = torch.float64


def _perturbed_layer(dim: int = 6, seed: int = 0, merges: int = 5) -> P4InvLinear:
    """A layer whose A is no longer a permutation and whose u, v, b are all nonzero."""
    torch.manual_seed(seed)
    layer = P4InvLinear(dim, dtype=F64)
    with torch.no_grad():
        for _ in range(merges):
            layer.u.copy_(0.3 * torch.randn(dim, dtype=F64))
            assert layer.merge(force=True).merged
        layer.u.copy_(0.3 * torch.randn(dim, dtype=F64))
        layer.b.copy_(torch.randn(dim, dtype=F64))
    return layer


def test_hundreds_of_merges_keep_inverse_and_slogdet_exact():
    torch.manual_seed(1)
    dim = 8
    layer = P4InvLinear(dim, init="reverse", dtype=F64)
    merged = 0
    with torch.no_grad():
        for _ in range(600):
            # Random perturbations, some pulling A back towards well-conditioned matrices, so
            # the walk explores without drifting to det = 0 or infinity.
            x = torch.randn(dim, dtype=F64)
            target = -0.3 * (layer.A @ x) if torch.rand(()) < 0.3 else 0.4 * torch.randn(dim, dtype=F64)
            layer.u.copy_(target / x.norm() ** 2)
            layer.v.copy_(x)
            merged += layer.merge().merged
    assert merged > 300
    sign, logabsdet = torch.linalg.slogdet(layer.A)
    assert torch.allclose(layer.A_inv, torch.linalg.inv(layer.A), atol=1e-8, rtol=0)
    assert layer.sign.item() == sign.item()
    assert abs(layer.logabsdet.item() - logabsdet.item()) < 1e-8


def test_forward_and_inverse_are_exact_inverses_with_opposite_logdets():
    layer = _perturbed_layer()
    x = torch.randn(3, 4, 6, dtype=F64)
    y, ld_fwd = layer(x)
    x_back, ld_inv = layer.inverse(y)
    assert ld_fwd.shape == (3, 4) and ld_inv.shape == (3, 4)
    assert torch.allclose(x_back, x, atol=1e-12)
    assert torch.allclose(ld_inv, -ld_fwd, atol=1e-12)
    # And the effective matrix is what forward applies.
    assert torch.allclose(y, x @ layer.weight().T + layer.b, atol=1e-12)


def test_logdet_equals_slogdet_of_perturbed_matrix():
    layer = _perturbed_layer(seed=3)
    _, ld = layer(torch.randn(5, 6, dtype=F64))
    sign, expected = torch.linalg.slogdet(layer.A + torch.outer(layer.u, layer.v))
    assert torch.allclose(ld, expected.expand(5), atol=1e-10)
    s, logabs = layer.slogdet()
    assert s.item() == sign.item() and abs(logabs.item() - expected.item()) < 1e-10


class _Inverse(torch.nn.Module):
    """Wraps a layer so that calling it runs the inverse pass (for functional_call)."""

    def __init__(self, layer: P4InvLinear):
        super().__init__()
        self.layer = layer

    def forward(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.layer.inverse(y)


@pytest.mark.parametrize("direction", ["forward", "inverse"])
def test_gradients_flow_to_u_v_b(direction):
    layer = _perturbed_layer(dim=4, seed=4)
    module, prefix = (layer, "") if direction == "forward" else (_Inverse(layer), "layer.")
    x = torch.randn(3, 4, dtype=F64)

    def fn(u, v, b):
        params = {prefix + "u": u, prefix + "v": v, prefix + "b": b}
        return torch.func.functional_call(module, params, (x,))

    params = tuple(p.detach().clone().requires_grad_(True) for p in (layer.u, layer.v, layer.b))
    assert torch.autograd.gradcheck(fn, params)


def test_correction_reduces_residual_as_seventh_order_predicts():
    torch.manual_seed(5)
    dim = 10
    layer = P4InvLinear(dim, dtype=F64)
    eye = torch.eye(dim, dtype=F64)
    A = eye + 0.2 * torch.randn(dim, dim, dtype=F64) / dim**0.5
    R = torch.randn(dim, dim, dtype=F64)
    R = 0.4 * R / torch.linalg.matrix_norm(R, ord=2)  # spectral norm 0.4: the iteration converges
    with torch.no_grad():
        layer.A.copy_(A)
        layer.A_inv.copy_(torch.linalg.solve(A, eye - R))  # so that I - A A_inv = R exactly
    before = layer.residual()
    reported_before, after = layer.correct()
    assert reported_before == pytest.approx(before, rel=1e-12)
    predicted = torch.linalg.matrix_power(R, 7) @ (3 * eye + R) @ (3 * eye + R) / 16
    assert torch.allclose(eye - A @ layer.A_inv, predicted, atol=1e-12)
    assert after == pytest.approx(predicted.abs().max().item(), rel=1e-6)
    assert after < 1e-2 * before


def test_correction_that_would_diverge_is_rejected():
    layer = P4InvLinear(4, dtype=F64)
    with torch.no_grad():
        layer.A_inv.mul_(-1.0)  # residual 2: far outside the convergence region
    saved = layer.A_inv.clone()
    assert layer.correct() == pytest.approx((2.0, 2.0))  # (before, after): the step was not taken
    assert torch.equal(layer.A_inv, saved)


def test_merge_rules_skip_force_and_reset():
    layer = P4InvLinear(4, dtype=F64)
    with torch.no_grad():
        layer.v.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64))
        layer.u.copy_(torch.tensor([-0.99, 0.0, 0.0, 0.0], dtype=F64))  # G = 0.01: ln|G| = -4.6 < -2.5
    A0 = layer.A.clone()
    result = layer.merge()
    assert result is MergeResult.SKIPPED and not result.merged
    assert torch.equal(layer.A, A0) and layer.u[0].item() == -0.99
    result = layer.merge(force=True)
    assert result is MergeResult.FORCED and result.merged
    assert layer.A[0, 0].item() == pytest.approx(0.01)
    assert layer.logabsdet.item() == pytest.approx(torch.log(torch.tensor(0.01)).item())
    assert torch.all(layer.u == 0)
    # A merge that flips the sign of det keeps track of it (forced: ln|G det A| = ln 0.01 < -2.5).
    with torch.no_grad():
        layer.v.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64))
        layer.u.copy_(torch.tensor([-0.02, 0.0, 0.0, 0.0], dtype=F64))  # A00: 0.01 -> -0.01
    assert layer.merge(force=True) is MergeResult.FORCED and layer.sign.item() == -1.0
    # Within the bounds a merge is accepted, forced or not.
    with torch.no_grad():
        layer.v.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64))
        layer.u.copy_(torch.tensor([-0.99, 0.0, 0.0, 0.0], dtype=F64))  # A00: -0.01 -> -1, G = 100
    result = layer.merge()
    assert result is MergeResult.ACCEPTED and result.merged and layer.A[0, 0].item() == pytest.approx(-1.0)
    assert layer.sign.item() == -1.0 and layer.logabsdet.item() == pytest.approx(0.0, abs=1e-12)
    with torch.no_grad():  # the merge drew a new v; v = e0 and u = 0.5 e1 give G = 1, inside the bounds
        layer.v.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64))
        layer.u.copy_(torch.tensor([0.0, 0.5, 0.0, 0.0], dtype=F64))
    assert layer.merge(force=True) is MergeResult.ACCEPTED
    with torch.no_grad():
        layer.u.copy_(torch.tensor([float("nan"), 0.0, 0.0, 0.0], dtype=F64))
    A1, inv1, ld1 = layer.A.clone(), layer.A_inv.clone(), layer.logabsdet.clone()
    result = layer.merge(force=True)
    assert result is MergeResult.RESET and not result.merged
    assert torch.equal(layer.A, A1) and torch.equal(layer.A_inv, inv1) and torch.equal(layer.logabsdet, ld1)
    assert torch.all(layer.u == 0) and torch.isfinite(layer.v).all()


def test_merge_keeps_effective_map_and_parameter_identity():
    layer = _perturbed_layer(seed=7)
    u_id, v_id = id(layer.u), id(layer.v)
    x = torch.randn(4, 6, dtype=F64)
    y0, ld0 = layer(x)
    assert layer.merge(force=True).merged
    y1, ld1 = layer(x)
    assert id(layer.u) == u_id and id(layer.v) == v_id
    assert torch.allclose(y0, y1, atol=1e-12) and torch.allclose(ld0, ld1, atol=1e-12)


def test_penalty_zero_inside_bounds_and_pushes_back_outside():
    layer = P4InvLinear(3, dtype=F64)
    assert layer.penalty().item() == 0.0
    with torch.no_grad():
        layer.v.copy_(torch.tensor([1.0, 0.0, 0.0], dtype=F64))
        layer.u.copy_(torch.tensor([-0.999, 0.0, 0.0], dtype=F64))  # ln|G| = ln 1e-3 = -6.9
    log_g = torch.log(torch.tensor(1e-3, dtype=F64)).item()
    pen = layer.penalty()  # the merge bounds: ln|G| below c0_min = -6 and ln|G det A| below c1_min = -2.5
    assert pen.item() == pytest.approx((layer.c0_min - log_g) ** 2 + (layer.c1_min - log_g) ** 2)
    pen.backward()
    assert layer.u.grad[0].item() < 0  # gradient descent raises u0, moving G away from 0
    # Appendix A's own penalty interval [-2, 15] for both quantities, passed explicitly.
    paper = layer.penalty(c0_min=-2.0, c0_max=15.0, c1_min=-2.0, c1_max=15.0)
    assert paper.item() == pytest.approx(2 * (-2.0 - log_g) ** 2)


def test_penalty_and_merge_share_the_bounds():
    """penalty() is zero exactly where merge() accepts: ln|G det A| pushed past c1_max or c1_min."""
    layer = P4InvLinear(3, dtype=F64)
    assert (layer.c0_min, layer.c0_max, layer.c1_min, layer.c1_max) == (-6.0, float("inf"), -2.5, 15.5)
    cases = {
        15.4: MergeResult.ACCEPTED,
        15.6: MergeResult.SKIPPED,
        -2.4: MergeResult.ACCEPTED,
        -2.6: MergeResult.SKIPPED,
    }
    for log_det, expected in cases.items():
        with torch.no_grad():
            layer.logabsdet.fill_(log_det)  # G = 1 (u = 0), so ln|G det A| = log|det A|
            layer.u.zero_()
        pen = layer.penalty().item()
        if expected is MergeResult.ACCEPTED:
            assert pen == 0.0, log_det
        else:
            bound = layer.c1_max if log_det > 0 else layer.c1_min
            assert pen == pytest.approx((log_det - bound) ** 2), log_det
        assert layer.merge() is expected, log_det
    # Narrower bounds are the layer's own, for the merge and the penalty alike.
    narrow = P4InvLinear(3, dtype=F64, c1_min=-1.0, c1_max=1.0)
    with torch.no_grad():
        narrow.logabsdet.fill_(2.0)
        narrow.u.zero_()
    assert narrow.penalty().item() == pytest.approx(1.0)
    assert narrow.merge() is MergeResult.SKIPPED and narrow.merge(force=True) is MergeResult.FORCED
    with pytest.raises(InputError):
        P4InvLinear(3, c0_min=1.0, c0_max=0.0)


@pytest.mark.parametrize("options", [{"foreach": False}, {"foreach": True}, {"fused": True}])
def test_scheduler_resets_only_v_adam_state(options):
    torch.manual_seed(8)
    layer = P4InvLinear(5, dtype=torch.float32)
    opt = torch.optim.Adam(layer.parameters(), lr=1e-2, **options)
    sched = P4InvScheduler(layer, opt, merge_every=3, force_every=1, correct_every=0)

    def train_step():
        y, ld = layer(torch.randn(16, 5))
        loss = (y**2).sum(-1).mean() - ld.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(2):
        train_step()
        sched.step()
    train_step()
    kept = {name: {k: t.clone() for k, t in opt.state[p].items()} for name, p in (("u", layer.u), ("b", layer.b))}
    sched.step()  # third step: forced merge
    assert sched.stats["accepted"] + sched.stats["forced"] == 1
    v_state = opt.state[layer.v]
    assert torch.all(v_state["exp_avg"] == 0) and torch.all(v_state["exp_avg_sq"] == 0)
    assert float(v_state["step"]) == 0.0
    for name, p in (("u", layer.u), ("b", layer.b)):
        for key, value in kept[name].items():
            assert torch.equal(opt.state[p][key], value)
    train_step()  # the optimizer keeps working after the reset
    assert float(opt.state[layer.v]["step"]) == 1.0
    assert all(torch.isfinite(p).all() for p in layer.parameters())


def test_scheduler_counts_schedule_and_state_dict_round_trip():
    torch.manual_seed(9)
    layer = P4InvLinear(4, dtype=F64)
    sched = P4InvScheduler(
        torch.nn.Sequential(layer, P4InvLinear(4, dtype=F64)), None, merge_every=2, force_every=3, correct_every=2
    )
    assert len(sched.layers) == 2
    for _ in range(12):
        sched.step()
    assert sched.attempts == 6
    assert sched.stats["corrections"] == 3
    assert sched.stats["accepted"] + sched.stats["forced"] + sched.stats["skipped"] == 12
    other = P4InvScheduler(layer, None, merge_every=2, force_every=3, correct_every=2)
    other.load_state_dict(sched.state_dict())
    assert other.state_dict() == sched.state_dict()
    with pytest.raises(InputError):
        P4InvScheduler(layer, None, merge_every=0)


@pytest.mark.slow
def test_reaches_negative_identity_through_det_zero_without_penalty():
    torch.manual_seed(10)
    dim = 5
    layer = P4InvLinear(dim, bias=False, dtype=F64)
    opt = torch.optim.SGD(layer.parameters(), lr=1e-2)
    sched = P4InvScheduler(layer, opt, merge_every=1, force_every=10, correct_every=50)
    target = -torch.eye(dim, dtype=F64)
    for _ in range(3000):
        x = 2 * torch.rand(128, dim, dtype=F64) - 1
        loss = ((layer(x)[0] - x @ target.T) ** 2).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    assert sched.stats["forced"] > 0  # det = 0 was crossed by forced merges
    assert (layer.weight() - target).abs().max().item() < 1e-4
    assert layer.sign.item() * torch.sign(1 + layer.v @ layer.A_inv @ layer.u).item() == -1.0
    assert abs(layer.logabsdet.item() + layer.log_factor().item()) < 1e-3
    assert layer.residual() < 1e-8
    sign, logabsdet = torch.linalg.slogdet(layer.A)
    assert layer.sign.item() == sign.item() and abs(layer.logabsdet.item() - logabsdet.item()) < 1e-8


def test_state_dict_round_trip_restores_buffers():
    layer = _perturbed_layer(seed=11)
    with torch.no_grad():
        layer.A_inv.add_(1e-3)  # an imperfect inverse must come back as it was, not recomputed
    fresh = P4InvLinear(6, dtype=F64)
    fresh.load_state_dict(layer.state_dict())
    assert set(layer.state_dict()) == {"u", "v", "b", "A", "A_inv", "logabsdet", "sign"}
    assert {n for n, _ in layer.named_parameters()} == {"u", "v", "b"}
    for name, value in layer.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value), name
    x = torch.randn(3, 6, dtype=F64)
    assert torch.equal(fresh(x)[0], layer(x)[0]) and torch.equal(fresh.inverse(x)[1], layer.inverse(x)[1])


def test_reverse_init_sign_and_parameter_count():
    for dim in range(1, 10):
        layer = P4InvLinear(dim, init="reverse", dtype=F64)
        sign, logabsdet = torch.linalg.slogdet(layer.A)
        assert layer.sign.item() == sign.item() == (1.0 if dim % 4 < 2 else -1.0)
        assert layer.logabsdet.item() == logabsdet.item() == 0.0
        assert torch.equal(layer.A_inv, layer.A.T) and torch.equal(layer.A @ layer.A_inv, torch.eye(dim, dtype=F64))
    layer = P4InvLinear(60, init="reverse")
    assert sum(p.numel() for p in layer.parameters() if p.requires_grad) == 180
    assert sum(p.numel() for p in P4InvLinear(60, bias=False).parameters()) == 120
    x = torch.arange(60.0).unsqueeze(0)
    assert torch.equal(layer(x)[0], x.flip(-1))


def test_float32_and_bad_input():
    layer = P4InvLinear(7)
    assert layer.A.dtype == torch.float32 and layer.u.dtype == torch.float32
    y, ld = layer(torch.randn(2, 7))
    assert y.dtype == torch.float32 and ld.shape == (2,)
    layer64 = layer.to(F64)
    assert layer64.A_inv.dtype == F64 and layer64.logabsdet.dtype == F64
    with pytest.raises(InputError):
        P4InvLinear(7, init="identity")
    with pytest.raises(InputError):
        P4InvLinear(0)
    with pytest.raises(InputError):
        layer64(torch.randn(2, 6, dtype=F64))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    layer = _perturbed_layer(seed=12)
    gpu = P4InvLinear(6, dtype=F64, device="cuda")
    gpu.load_state_dict(layer.state_dict())
    x = torch.randn(4, 6, dtype=F64)
    y, ld = gpu(x.cuda())
    assert torch.allclose(y.cpu(), layer(x)[0]) and torch.allclose(ld.cpu(), layer(x)[1])
    assert gpu.merge(force=True).merged and gpu.correct()[1] < 1e-10
    opt = torch.optim.Adam(gpu.parameters())
    loss = gpu(x.cuda())[0].pow(2).sum()
    loss.backward()
    opt.step()
    sched = P4InvScheduler(gpu, opt, merge_every=1, force_every=1, correct_every=1)
    sched.step()
    assert float(opt.state[gpu.v]["step"]) == 0.0


def test_benchmark_layers_compute_what_p4inv_computes():
    """The cost benchmark's baselines are real invertible flows with correct log-dets."""
    bench = load_script("run/bench/bench_p4inv.py")
    torch.manual_seed(13)
    cpu = torch.device("cpu")
    layers = [
        bench.StandardLinear(12, cpu),
        bench.LULinear(12, cpu),
        bench.LULinear(12, cpu, invert_matrices=False),
        P4InvLinear(12, init="reverse"),
    ]
    x = torch.randn(5, 12)
    with torch.no_grad():
        for layer in layers:
            y, ld = layer(x)
            x_back, ld_inv = layer.inverse(y)
            assert torch.allclose(x_back, x, atol=1e-4) and torch.allclose(ld_inv, -ld)
            assert torch.isfinite(bench.kl_evaluation(layer, x, torch.randn(5, 12)))
        lu = layers[1]
        L = torch.tril(lu.lower, -1) + torch.eye(12)
        W = torch.zeros(12, 12)
        W[lu.perm] = L @ torch.triu(lu.upper)
        assert torch.allclose(lu(x)[0], x @ W.T + lu.bias, atol=1e-5)
        assert torch.allclose(lu(x)[1][0], torch.linalg.slogdet(W)[1], atol=1e-5)


@pytest.mark.slow
def test_linear_problems_script_smoke(tmp_path):
    script = load_script("run/linear_problems.py")
    summary = script.main(["--steps", "40", "--out", str(tmp_path), "--jobs", "1"])
    for name in ("posdef_loss", "posdef_eigenvalues", "orthogonal_eigenvalues", "negeye_det_residual"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0
    assert (tmp_path / "summary.json").exists()
    # the stored inverse and the tracked log|det| stay exact through the merges of the -I problem
    assert summary["negeye_inverse_recovered"] is True and summary["negeye_peak_residual"] < 1e-5
    assert abs(summary["negeye_tracked_logdet_error"]) < 1e-4
    assert summary["posdef"]["P4Inv N=10"]["schedule"]["accepted"] > 0
