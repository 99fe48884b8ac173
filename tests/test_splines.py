"""Spline couplings and the spline generators: exact inverses and log-dets, the circle, save/load."""

from __future__ import annotations

import math

import pytest
import torch

from bgp4.errors import InputError
from bgp4.flows.splines import CircularShift, MaskedCoupling, RQSpline, wrap_angle
from bgp4.generator.model import build_generator, load_generator, n_parameters


def _perturb(module: torch.nn.Module, scale: float, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


def _coupling(seed: int = 0) -> MaskedCoupling:
    torch.manual_seed(seed)
    mask = torch.tensor([True, False, True, False, True, False])
    circular = torch.tensor([True, True, False, False, False, False])
    c = MaskedCoupling(mask, circular, hidden=16, bins=6, dtype=torch.float64)
    _perturb(c, 0.5, seed)
    return c


def _inputs(n: int = 32, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g, dtype=torch.float64) * 2.0
    x[:, :2] = (torch.rand(n, 2, generator=g, dtype=torch.float64) * 2 - 1) * math.pi
    return x


def test_spline_inverts_and_logdet_matches_autograd():
    spline = RQSpline(bins=5, bound=3.0)
    g = torch.Generator().manual_seed(0)
    params = torch.randn(1, 4, spline.n_params, generator=g, dtype=torch.float64)
    x = torch.tensor([[-4.0, -1.2, 0.3, 2.9]], dtype=torch.float64)  # one point in a tail
    scale = torch.ones(4, dtype=torch.float64)
    y, ladj = spline.forward(x, params, scale)
    back, ladj_back = spline.inverse(y, params, scale)
    assert torch.allclose(back, x, atol=1e-10) and torch.allclose(ladj_back, -ladj, atol=1e-10)
    assert y[0, 0] == x[0, 0]  # identity tail outside [-B, B]
    jac = torch.autograd.functional.jacobian(lambda v: spline.forward(v[None], params, scale)[0][0], x[0])
    assert torch.linalg.slogdet(jac)[1].item() == pytest.approx(ladj.item(), abs=1e-10)


def test_spline_knots_are_zukos():
    """The knots built with the written-out softmax equal zuko's own constructor's, and so do the
    spline values, log-dets, inverses and gradients, for parameters of every size."""
    from zuko.transforms import MonotonicRQSTransform

    spline = RQSpline(bins=8, bound=5.0)
    g = torch.Generator().manual_seed(3)
    params = torch.randn(64, 5, spline.n_params, generator=g, dtype=torch.float64) * 20.0
    params.requires_grad_(True)
    ours = spline._spline(params)
    theirs = MonotonicRQSTransform(params[..., :8], params[..., 8:16], params[..., 16:], bound=5.0)
    for name in ("horizontal", "vertical", "derivatives"):
        assert torch.allclose(getattr(ours, name), getattr(theirs, name), rtol=1e-12, atol=1e-12), name
    x = torch.randn(64, 5, generator=g, dtype=torch.float64) * 3.0
    (y, ladj), (y_z, ladj_z) = ours.call_and_ladj(x), theirs.call_and_ladj(x)
    assert torch.allclose(y, y_z, atol=1e-12) and torch.allclose(ladj, ladj_z, atol=1e-12)
    assert torch.allclose(ours.inv(y), theirs.inv(y), atol=1e-12)
    grads = [torch.autograd.grad(t.call_and_ladj(x)[1].sum(), params)[0] for t in (ours, theirs)]
    assert torch.allclose(*grads, atol=1e-10)


def test_coupling_inverts_logdet_and_keeps_conditioning_part():
    c = _coupling()
    x = _inputs()
    y, logdet = c(x)
    assert torch.equal(y[:, ~c.mask], x[:, ~c.mask])
    assert y[:, :2].abs().max() <= math.pi + 1e-12  # angles stay on the circle
    back, logdet_back = c.inverse(y)
    assert torch.allclose(back, x, atol=1e-9) and torch.allclose(logdet_back, -logdet, atol=1e-9)
    for i in range(3):
        jac = torch.autograd.functional.jacobian(lambda v: c(v[None])[0][0], x[i])
        assert torch.linalg.slogdet(jac)[1].item() == pytest.approx(logdet[i].item(), abs=1e-8)


def test_circular_coupling_is_periodic_and_continuous_at_the_seam():
    c = _coupling(3)
    x = _inputs(4).repeat_interleave(2, 0)
    eps = 1e-7
    x[0::2, 0], x[1::2, 0] = math.pi - eps, -math.pi  # the same point seen from both sides of the seam
    y, logdet = c.inverse(x)
    assert torch.allclose(wrap_angle(y[0::2, 0] - y[1::2, 0]), torch.zeros(4, dtype=torch.float64), atol=1e-5)
    assert torch.allclose(logdet[0::2], logdet[1::2], atol=1e-4)
    # the conditioner sees a circular input through (cos, sin): shifting it by 2 pi changes nothing
    z = _inputs(8)
    moved = z.clone()
    moved[:, 1] += 2 * math.pi
    assert torch.allclose(c(z)[0][:, c.mask], c(moved)[0][:, c.mask], atol=1e-9)


def test_circular_shift():
    shift = CircularShift(torch.full((3,), 2.0), torch.tensor([True, False, True]))
    x = torch.tensor([[3.0, 5.0, -1.0]], dtype=torch.float64)
    y, logdet = shift(x)
    assert torch.allclose(y, torch.tensor([[5.0 - 2 * math.pi, 5.0, 1.0]], dtype=torch.float64)) and logdet.item() == 0
    assert torch.allclose(shift.inverse(y)[0], x)


def test_bad_spline_settings_are_refused():
    with pytest.raises(InputError):
        RQSpline(bins=1)
    with pytest.raises(InputError):
        MaskedCoupling(torch.ones(4, dtype=torch.bool), torch.zeros(4, dtype=torch.bool))


@pytest.fixture(scope="module")
def spline_models(md_frames, molecule):
    models = {}
    for kind in ("spline", "spline-p4inv"):
        torch.manual_seed(0)
        bg = build_generator(kind, data=md_frames[0], molecule=molecule, blocks=2, hidden=32, bins=6)
        _perturb(bg.flow, 0.05)
        models[kind] = bg
    return models


@pytest.mark.parametrize("kind", ["spline", "spline-p4inv"])
def test_spline_generators_are_exact_bijections(spline_models, kind, tmp_path):
    bg = spline_models[kind]
    assert bg.n_dims == 48 and bg.circular_latent.sum() >= 1
    s = bg.sample(300, generator=torch.Generator().manual_seed(2))
    ok = s.ok
    assert ok.float().mean() > 0.5  # randomly perturbed flows push some samples off the domain
    assert torch.allclose(bg.log_prob(s.x[ok]), s.log_q[ok], atol=2e-3, rtol=1e-5)  # float32 flow
    path = tmp_path / "model.pt"
    bg.save(path)
    again = load_generator(path)
    assert torch.equal(again.circular_latent, bg.circular_latent)
    assert torch.allclose(again.log_prob(s.x[ok]), bg.log_prob(s.x[ok]), atol=1e-5)


def test_log_prob_is_continuous_when_a_torsion_crosses_pi(spline_models, md_frames, molecule):
    """Rotate a methyl rotor of one frame through +-pi: log q changes smoothly (no cut, no jump)."""
    bg = spline_models["spline"]
    t = bg.transform
    row = next(i for i in range(t.n_ic) if bool(t.torsion_circular[i]))
    y, _ = t.from_cartesian(torch.as_tensor(md_frames[0][:1]))
    col = t.n_free_bonds + t.n_ic + row
    # torsion values that step across the +-pi branch of atan2
    angles = torch.linspace(math.pi - 0.05, math.pi + 0.05, 41, dtype=torch.float64)
    ys = y.repeat(len(angles), 1)
    ys[:, col] = wrap_angle(angles - t.torsion_cut[row] - math.pi)
    x, _ = t.to_cartesian(ys)
    lp = bg.log_prob(x.float()).double()
    assert torch.isfinite(lp).all()
    # steps of 0.0025 rad change log q by about 1e-4 (float32 resolution at this size); a cut at
    # +-pi would show as one step far above that
    assert (lp.diff().abs() < 0.01).all()


def test_parameter_counts(molecule):
    spline = build_generator("spline", molecule=molecule, shell=True)
    both = build_generator("spline-p4inv", molecule=molecule, shell=True)
    assert spline.config["blocks"] == 6 and spline.config["hidden"] == 256 and spline.config["bins"] == 8
    couplings = [m for m in spline.flow.layers if isinstance(m, MaskedCoupling)]
    assert len(couplings) == 12
    n_flat = int((~spline.circular_latent).sum())
    assert n_parameters(both) - n_parameters(spline) == 12 * 3 * n_flat


def test_bad_settings_and_old_model_files_are_refused(tmp_path):
    from bgp4.settings import TrainSettings

    for bad in (
        {"model": "glow"},
        {"model": "spline", "bins": 1},
        {"model": "spline", "bins": 65},
        {"model": "rnvp", "bins": 8},
        {"model": "spline", "hidden": -1},
        {"model": "spline", "lr_schedule": "step"},
        {"model": "spline", "clip_grad": -2.0},
    ):
        with pytest.raises(InputError):
            TrainSettings(**bad).validated()
    resolved = TrainSettings(model="spline").validated()
    assert (resolved.blocks, resolved.hidden, resolved.bins, resolved.lr_schedule, resolved.clip_grad) == (
        6,
        256,
        8,
        "cosine",
        10.0,
    )
    paper = TrainSettings(model="p4inv").validated()
    assert (paper.blocks, paper.hidden, paper.bins, paper.lr_schedule, paper.clip_grad) == (25, 60, 0, "constant", 0.0)
    old = tmp_path / "old.pt"
    torch.save({"config": {"kind": "rnvp", "blocks": 2}, "state_dict": {}}, old)  # no transform: an older format
    with pytest.raises(InputError, match="not a bgp4 model file"):
        load_generator(old)


def test_model_files_from_before_circular_torsions_still_load(md_frames, molecule, tmp_path):
    bg = build_generator("rnvp", data=md_frames[0], molecule=molecule, blocks=1, hidden=8)
    path = tmp_path / "model.pt"
    bg.save(path)
    payload = torch.load(path, weights_only=True)
    del payload["state_dict"]["transform.torsion_circular"]  # as written by earlier versions
    torch.save(payload, path)
    again = load_generator(path)
    assert not again.circular_latent.any()
    x = torch.as_tensor(md_frames[0][:16], dtype=torch.float32)
    assert torch.allclose(again.log_prob(x), bg.log_prob(x))
