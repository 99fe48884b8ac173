"""Couplings and the two Boltzmann generators: counts, exact log densities, save/load, variants."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bgp4.errors import InputError
from bgp4.flows import AffineCoupling, P4InvLinear, Swap
from bgp4.generator.model import build_generator, load_generator, n_parameters, weights_defined
from bgp4.simulation.atoms import constrained_bonds
from bgp4.simulation.molecule import get_molecule
from bgp4.simulation.system import SystemSpec


def _perturb(model: nn.Module, scale: float = 0.05, seed: int = 0) -> None:
    """Random non-zero weights everywhere (fresh couplings are the identity)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


def _plain_coupling(c: AffineCoupling) -> tuple[nn.Sequential, nn.Sequential]:
    """The obvious t and s nets holding c's weights."""
    nets = []
    for k in range(2):
        net = nn.Sequential(
            nn.Linear(c.n_cond, c.hidden),
            nn.ReLU(),
            nn.Linear(c.hidden, c.hidden),
            nn.ReLU(),
            nn.Linear(c.hidden, c.dim - c.n_cond),
        ).to(c.w1.dtype)
        with torch.no_grad():
            net[0].weight.copy_(c.w1[k].T)
            net[0].bias.copy_(c.b1[k, 0])
            net[2].weight.copy_(c.w2[k].T)
            net[2].bias.copy_(c.b2[k, 0])
            net[4].weight.copy_(c.w3[k].T)
            net[4].bias.copy_(c.b3[k, 0])
        nets.append(net)
    return nets[0], nets[1]


@pytest.fixture(scope="module")
def frames(md_frames):
    return torch.as_tensor(md_frames[0])


@pytest.mark.parametrize("dim,swap,n_cond", [(60, False, None), (60, True, None), (49, True, 25)])
def test_coupling_matches_plain_nets_and_inverts(dim, swap, n_cond):
    torch.manual_seed(0)
    c = AffineCoupling(dim, 60, swap=swap, n_cond=n_cond, dtype=torch.float64)
    _perturb(c, 0.3)
    assert n_parameters(c) == 2 * (c.n_cond * 60 + 60 + 60 * 60 + 60 + 60 * (dim - c.n_cond) + dim - c.n_cond) + 1
    x = torch.randn(16, dim, dtype=torch.float64)
    y, logdet = c(x)
    t_net, s_net = _plain_coupling(c)
    x1, x2 = x[:, : c.n_cond], x[:, c.n_cond :]
    s = torch.tanh(s_net(x1)) * c.scale
    y2 = x2 * torch.exp(s) + t_net(x1)
    expected = torch.cat((y2, x1) if swap else (x1, y2), dim=1)
    assert torch.allclose(y, expected, atol=1e-12) and torch.allclose(logdet, s.sum(1), atol=1e-12)
    x_back, logdet_back = c.inverse(y)
    assert torch.allclose(x_back, x, atol=1e-12) and torch.allclose(logdet_back, -logdet, atol=1e-12)
    jac = torch.autograd.functional.jacobian(lambda v: c(v[None])[0][0], x[0])
    assert torch.linalg.slogdet(jac)[1].item() == pytest.approx(logdet[0].item(), abs=1e-10)


def test_swap():
    x = torch.arange(10.0).view(2, 5)
    y, logdet = Swap(5, 2)(x)
    assert y[0].tolist() == [2.0, 3.0, 4.0, 0.0, 1.0] and logdet.tolist() == [0.0, 0.0]
    assert torch.equal(Swap(5, 2).inverse(y)[0], x)


def test_parameter_counts_at_paper_size(molecule):
    # the paper's 60-dim setup; with every constrained bond fixed (48 dims, the default) the same nets are narrower
    assert n_parameters(build_generator("rnvp", molecule=molecule, shell=True)) == 662_450
    assert n_parameters(build_generator("p4inv", molecule=molecule, shell=True)) == 669_650
    assert n_parameters(build_generator("rnvp", molecule=molecule, fix_constrained=False, shell=True)) == 735_050
    p4 = build_generator("p4inv", molecule=molecule, fix_constrained=False, shell=True)
    assert n_parameters(p4) == 744_050
    linears = [m for m in p4.flow.layers if isinstance(m, P4InvLinear)]
    assert len(linears) == 50
    reverse = torch.eye(60).flip(0)
    x = torch.randn(3, 60)
    for layer in linears:
        assert torch.equal(layer.A, reverse) and torch.equal(layer.u, torch.zeros(60))
        assert torch.equal(layer(x)[0], x.flip(1))


@pytest.mark.parametrize("kind", ["rnvp", "p4inv"])
def test_sample_log_q_matches_log_prob(kind, frames, molecule):
    torch.manual_seed(1)
    model = build_generator(kind, frames, blocks=2, molecule=molecule, dtype=torch.float64)
    _perturb(model, 0.05)
    x, log_q, ok, _ = model.sample(400)
    assert x.shape == (400, 22, 3) and log_q.shape == (400,) and ok.dtype == torch.bool
    print(f"\n{kind}: {100 * (1 - ok.float().mean()):.1f} % of samples flagged out of domain")
    # Torsions cannot leave their domain (logit map); only bonds <= 0 or angles outside (0, pi) can.
    assert ok.sum() > 300
    log_p = model.log_prob(x[ok])
    assert (log_p - log_q[ok]).abs().max() < 1e-6
    # Same thing via the flattened (B, 66) input.
    assert torch.allclose(model.log_prob(x[ok].reshape(-1, 66)), log_p)


def test_generating_in_slices_of_rows_matches_the_whole_batch(frames, molecule):
    # sampling and AIS push large batches through the flow in slices (bgp4.generator.rows)
    from bgp4.generator.rows import by_rows

    torch.manual_seed(2)
    model = build_generator("spline", frames, blocks=1, hidden=16, molecule=molecule, dtype=torch.float64)
    _perturb(model, 0.05)
    z = model.sample_latent(500, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        whole, sliced = model.generate(z), by_rows(model.generate, z, rows=128)
    assert torch.equal(sliced.ok, whole.ok) and torch.equal(sliced.z, whole.z)
    assert torch.allclose(sliced.x, whole.x, rtol=0, atol=1e-12)
    assert torch.allclose(sliced.log_q, whole.log_q, rtol=0, atol=1e-9)


@pytest.mark.slow
def test_sample_is_differentiable_and_nll_trains(frames, molecule):
    torch.manual_seed(2)
    model = build_generator("p4inv", frames, blocks=2, molecule=molecule)
    x, log_q, _, _ = model.sample(32)
    (x.square().sum() + log_q.sum()).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
    data = frames[:256].float()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    first = model.nll(data).mean().item()
    for _ in range(30):
        loss = model.nll(data).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first


@pytest.mark.parametrize("kind", ["rnvp", "p4inv"])
def test_save_load_round_trip(kind, frames, molecule, tmp_path):
    model = build_generator(kind, frames, blocks=2, molecule=molecule)
    _perturb(model, 0.05)
    path = tmp_path / "model.pt"
    model.save(path)
    loaded = load_generator(path)
    assert (
        loaded.config
        == model.config
        == {
            "kind": kind,
            "blocks": 2,
            "hidden": 60,
            "fix_constrained": True,
            "n_dims": 48,
            **molecule.record(),  # the molecule and its system, so that the model rebuilds it alone
            "zmatrix": "hand",
        }
    )
    assert torch.equal(loaded.log_prob(frames[:64]), model.log_prob(frames[:64]))
    with pytest.raises(InputError):
        load_generator(tmp_path / "missing.pt")


def test_dtype_changes_keep_transform_float64(frames, molecule):
    model = build_generator("rnvp", frames, blocks=1, molecule=molecule, dtype=torch.float64)
    reference = model.log_prob(frames[:32])
    model.float()
    assert model.dtype == torch.float32 and model.transform.bond_mean.dtype == torch.float64
    assert torch.allclose(model.log_prob(frames[:32]).double(), reference, atol=1e-3)


def test_fix_constrained_generator(frames, molecule):
    torch.manual_seed(3)
    model = build_generator("rnvp", frames, blocks=2, fix_constrained=True, molecule=molecule, dtype=torch.float64)
    assert model.config["n_dims"] == model.n_dims == 48
    _perturb(model, 0.05)
    x, log_q, ok, _ = model.sample(200)
    lengths = constrained_bonds(molecule)
    for (i, j), length in lengths.items():  # all 12, HA-CA included
        assert ((x[:, i] - x[:, j]).norm(dim=-1) - length).abs().max() < 1e-9
    assert (model.log_prob(x[ok]) - log_q[ok]).abs().max() < 1e-6


def test_weights_note_says_why_the_weights_are_defined(frames, molecule):
    free = build_generator("rnvp", frames, blocks=1, fix_constrained=False, molecule=molecule)
    fixed = build_generator("rnvp", frames, blocks=1, fix_constrained=True, molecule=molecule)
    held = weights_defined(fixed, molecule)
    assert held == dict(weights_defined=True, weights_note="every constrained bond is held fixed")
    assert weights_defined(free, molecule)["weights_defined"] is False
    unconstrained = get_molecule(spec=SystemSpec(constraints="none"))
    none = weights_defined(free, unconstrained)
    assert none == dict(weights_defined=True, weights_note="the system has no constraints")


def test_bad_kind(molecule):
    with pytest.raises(InputError):
        build_generator("glow", molecule=molecule, shell=True)
    with pytest.raises(InputError):
        build_generator("rnvp", blocks=-1, molecule=molecule, shell=True)


@pytest.mark.parametrize("kind", ["rnvp", "p4inv", "spline", "spline-p4inv"])
def test_the_kind_registry_says_what_is_built(kind, molecule):
    from bgp4.flows.p4inv import P4InvLinear
    from bgp4.flows.splines import MaskedCoupling
    from bgp4.kinds import get_kind

    spec = get_kind(kind)
    model = build_generator(kind, molecule=molecule, shell=True, blocks=1, hidden=8)
    modules = list(model.flow.modules())
    assert any(isinstance(m, P4InvLinear) for m in modules) == spec.p4inv
    assert any(isinstance(m, MaskedCoupling) for m in modules) == spec.circular
    assert model.transform.structure()["torsions"] == spec.torsions
    assert model.config == {
        "kind": kind,
        **spec.architecture(1, 8),
        "fix_constrained": True,
        "n_dims": 48,
        **molecule.record(),
        "zmatrix": "hand",
    }


def test_unfitted_generator_needs_shell(molecule):
    with pytest.raises(InputError, match="shell=True"):
        build_generator("rnvp", molecule=molecule)
    shell = build_generator("rnvp", molecule=molecule, shell=True)
    assert shell.config["molecule"] == molecule.name == shell.molecule_name


def test_saved_generator_knows_its_molecule(frames, molecule, tmp_path):
    path = tmp_path / "model.pt"
    build_generator("rnvp", frames, molecule, blocks=1).save(path)
    loaded = load_generator(path)
    assert loaded.molecule_name == molecule.name
    assert loaded.molecule().n_atoms == molecule.n_atoms


@pytest.mark.parametrize("kind", ["rnvp", "spline"])
def test_automatic_zmatrix_generator_reloads_to_the_same_generator(frames, molecule, tmp_path, kind):
    from bgp4.simulation.zmatrix import automatic_zmatrix

    rows, block = automatic_zmatrix(molecule.topology)
    bg = build_generator(kind, frames, molecule, blocks=1, hidden=16, zmatrix="auto")
    hand = build_generator(kind, frames, molecule, blocks=1, hidden=16)
    assert bg.n_dims == hand.n_dims == 48  # constrained bonds held fixed either way
    assert bg.zmatrix == "auto" and hand.zmatrix == "hand"
    assert [list(r) for r in bg.transform.z_matrix] == [list(r) for r in rows]
    assert [list(r) for r in hand.transform.z_matrix] != [list(r) for r in rows]
    _perturb(bg)
    bg.save(tmp_path / "model.pt")
    loaded = load_generator(tmp_path / "model.pt")
    assert loaded.config == bg.config and loaded.zmatrix == "auto"
    assert [list(r) for r in loaded.transform.z_matrix] == [list(r) for r in rows]
    assert list(loaded.molecule().rigid_block) == list(block)
    x = frames[:32]
    with torch.no_grad():
        torch.testing.assert_close(loaded.log_prob(x), bg.log_prob(x), rtol=0, atol=0)


def test_unknown_zmatrix_is_refused(molecule):
    with pytest.raises(InputError, match="zmatrix must be one of hand, auto"):
        build_generator("rnvp", molecule=molecule, shell=True, zmatrix="bond")


def test_damaged_model_file_is_refused_cleanly(frames, molecule, tmp_path):
    path = tmp_path / "model.pt"
    build_generator("rnvp", frames, blocks=1, molecule=molecule).save(path)
    payload = path.read_bytes()
    damaged = {"truncated.pt": payload[: len(payload) // 2], "garbage.pt": b"\x80\x02 not a model", "empty.pt": b""}
    for name, content in damaged.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(InputError, match="is not a bgp4 model file"):
            load_generator(tmp_path / name)
    torch.save({"something": torch.zeros(3)}, tmp_path / "other.pt")  # a torch file, not a model
    with pytest.raises(InputError, match="is not a bgp4 model file"):
        load_generator(tmp_path / "other.pt")
