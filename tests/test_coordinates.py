"""Mixed coordinate transform: round trips, Jacobian, superposition, domain flags, shells."""

from __future__ import annotations

import math

import mdtraj
import numpy as np
import pytest
import torch

from bgp4.errors import InputError
from bgp4.flows import MixedCoordinateTransform
from bgp4.flows.geometry import on_kabsch_maximum, orbit_log_volume
from bgp4.flows.torsions import TORSION_REACH, _narrow_scale, _sparsest_cut
from bgp4.simulation.atoms import constrained_bonds


@pytest.fixture(scope="module")
def frames(md_frames):
    return torch.as_tensor(md_frames[0])


@pytest.fixture(scope="module")
def transform(frames, molecule):
    return MixedCoordinateTransform.fit(frames, molecule)


def _wrap(a: torch.Tensor) -> torch.Tensor:
    return torch.remainder(a + math.pi, 2 * math.pi) - math.pi


def _random_rigid_motion(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    if torch.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return x @ q.T + torch.randn(3, generator=g, dtype=torch.float64) * 3.0


def test_dimensions_and_buffers(transform):
    assert transform.n_dims == 17 * 3 + 9 == 60
    assert sum(p.numel() for p in transform.parameters()) == 0  # everything fitted is a buffer
    assert "pca_vectors" in transform.state_dict() and "torsion_cut" in transform.state_dict()


def test_internal_coordinates_match_mdtraj(transform, frames, molecule):
    traj = mdtraj.Trajectory(frames[:500].numpy(), molecule.topology)
    zm = molecule.z_matrix
    bonds, angles, torsions = transform.internal_coordinates(frames[:500])
    # mdtraj computes in float32, hence the tolerance.
    assert np.allclose(bonds.numpy(), mdtraj.compute_distances(traj, zm[:, :2]), atol=1e-6)
    assert np.allclose(angles.numpy(), mdtraj.compute_angles(traj, zm[:, :3]), atol=1e-5)
    assert _wrap(torsions - torch.as_tensor(mdtraj.compute_dihedrals(traj, zm), dtype=torch.float64)).abs().max() < 1e-5


def test_cartesian_round_trip_keeps_internal_coordinates(transform, frames, molecule):
    y, _ = transform.from_cartesian(frames)
    assert transform.in_domain(y).all()
    back, _ = transform.to_cartesian(y)
    for before, after in zip(transform.internal_coordinates(frames), transform.internal_coordinates(back)):
        assert _wrap(after - before).abs().max() < 1e-6
    # Independent check with mdtraj (float32 inside, so a looser bound).
    zm = molecule.z_matrix
    t0, t1 = (mdtraj.Trajectory(a[:300].numpy(), molecule.topology) for a in (frames, back))
    assert np.abs(mdtraj.compute_distances(t1, zm[:, :2]) - mdtraj.compute_distances(t0, zm[:, :2])).max() < 1e-6
    assert np.abs(mdtraj.compute_angles(t1, zm[:, :3]) - mdtraj.compute_angles(t0, zm[:, :3])).max() < 1e-5
    dihedral_diff = mdtraj.compute_dihedrals(t1, zm) - mdtraj.compute_dihedrals(t0, zm)
    assert np.abs(np.angle(np.exp(1j * dihedral_diff))).max() < 1e-5


def test_reconstruction_loses_only_rigid_motion(transform, frames):
    error = transform.reconstruction_error(frames)
    print(f"\nreconstruction RMSD on MD frames: max {error.max():.2e} nm, mean {error.mean():.2e} nm")
    assert error.shape == (len(frames),)
    assert error.max() < 1e-8
    # The six dropped PCA directions carry no variance: they are global translation and rotation.
    ev = transform.pca_eigenvalues
    assert ev[9:].abs().max() < 1e-12 * ev[0]
    assert (transform.pca_std > 0).all()


def test_flow_round_trip_in_domain(transform, frames):
    y0, _ = transform.from_cartesian(frames[:400])
    g = torch.Generator().manual_seed(1)
    y = y0 + 0.7 * torch.randn(y0.shape, generator=g, dtype=torch.float64)
    ok = transform.in_domain(y)
    assert ok.float().mean() > 0.5
    x, logdet = transform.to_cartesian(y[ok])
    y_back, logdet_back = transform.from_cartesian(x)
    assert (y_back - y[ok]).abs().max() < 1e-6
    assert (logdet + logdet_back).abs().max() < 1e-8


def test_logdet_matches_autograd(transform, frames):
    """log|det J| = log sqrt(det J^T J) of the embedding + the rigid block's orbit volume."""
    y, _ = transform.from_cartesian(frames[::700])
    x, logdet = transform.to_cartesian(y)
    orbit = transform._orbit(x[:, transform.rigid_block])
    for i in range(len(y)):
        jac = torch.autograd.functional.jacobian(lambda v: transform.to_cartesian(v[None])[0].reshape(-1), y[i])
        assert jac.shape == (66, 60)
        expected = 0.5 * torch.logdet(jac.T @ jac) + orbit[i]
        assert logdet[i].item() == pytest.approx(expected.item(), abs=1e-6)


def _with_rigid_motion(transform, v: torch.Tensor) -> torch.Tensor:
    """Positions (3 n_atoms,) of flow coordinates v[:-6], rotated by exp([v[-6:-3]]x), moved by v[-3:]."""
    w = v[-6:-3]
    zero = w.new_zeros(())
    rows = ([zero, -w[2], w[1]], [w[2], zero, -w[0]], [-w[1], w[0], zero])
    skew = torch.stack([torch.stack(row) for row in rows])
    x = transform.to_cartesian(v[None, :-6])[0][0]
    return (x @ torch.linalg.matrix_exp(skew).T + v[-3:]).reshape(-1)


def test_logdet_is_that_of_the_full_map_with_rotation_and_translation(transform, frames):
    """(flow coordinates, rotation, translation) -> positions is square: its log|det| differs from
    the transform's by one constant, so q over positions is exact. Without the orbit term it would
    vary with the block's shape (the check below fails then)."""
    y, _ = transform.from_cartesian(frames[::300])
    x, logdet = transform.to_cartesian(y)
    full, orbit = [], transform._orbit(x[:, transform.rigid_block])
    for i in range(len(y)):
        v = torch.cat((y[i], y.new_zeros(6)))
        jac = torch.autograd.functional.jacobian(lambda u: _with_rigid_motion(transform, u), v)
        assert jac.shape == (66, 66)
        full.append(torch.linalg.slogdet(jac)[1])
    offset = torch.stack(full) - logdet
    assert (offset - offset[0]).abs().max() < 1e-6
    assert (offset + orbit - offset[0] - orbit[0]).abs().max() > 1e-3  # the orbit term is not negligible here


def test_kabsch_maximum_flags_a_block_that_superposition_would_turn(transform):
    ref = transform.rigid_ref
    assert on_kabsch_maximum(ref[None], ref).item()  # the reference is the fit's maximum
    # inverted through its centre the block still meets sum s_i x r_i = 0, at the fit's minimum
    assert not on_kabsch_maximum(-ref[None], ref).item()
    inertia = torch.trace(ref.T @ ref) * torch.eye(3, dtype=ref.dtype) - ref.T @ ref  # unit masses
    assert orbit_log_volume(ref[None], ref).item() == pytest.approx(torch.logdet(inertia).item())


def test_superposition_and_rigid_block_rmsd(transform, frames):
    assert 0 < transform.fit_max_rmsd < 0.03
    moved = _random_rigid_motion(frames[:200])
    assert transform.rigid_rmsd(moved).max() < 0.03
    y0, ld0 = transform.from_cartesian(frames[:200])
    y1, ld1 = transform.from_cartesian(moved)
    assert (y1 - y0).abs().max() < 1e-8 and (ld1 - ld0).abs().max() < 1e-8


def test_in_domain_flags(transform, frames):
    y, _ = transform.from_cartesian(frames[:4])
    bad = y.clone()
    bad[0, 5] = -transform.bond_mean[5] / transform.bond_std[5] - 1.0  # bond < 0
    bad[1, 17 + 3] = (math.pi + 0.1 - transform.angle_mean[3]) / transform.angle_std[3]  # angle > pi
    assert transform.in_domain(bad).tolist() == [False, False, True, True]
    back, _ = transform.from_cartesian(transform.to_cartesian(bad)[0])
    assert ((back - bad).abs().max(1).values > 1e-3)[:2].all()  # out of domain: no round trip


def test_torsions_never_cross_the_cut(transform, frames):
    """Any real flow coordinate is a torsion inside (cut, cut + 2 pi): it round-trips."""
    y, _ = transform.from_cartesian(frames[:3])
    far = y.clone()
    far[:, 34:51] = torch.tensor([-8.0, 0.5, 8.0], dtype=y.dtype)[:, None]
    assert transform.in_domain(far).all()
    back, _ = transform.from_cartesian(transform.to_cartesian(far)[0])
    assert (back - far).abs().max() < 1e-5
    _, _, torsions, _, _ = transform._unnormalize(far)
    cut = transform.torsion_cut
    assert ((torsions > cut) & (torsions < cut + 2 * math.pi)).all()


def test_shell_restores_state(transform, frames):
    shell = MixedCoordinateTransform(**transform.structure())
    shell.load_state_dict(transform.state_dict())
    y0, ld0 = transform.from_cartesian(frames[:50])
    y1, ld1 = shell.from_cartesian(frames[:50])
    assert torch.equal(y0, y1) and torch.equal(ld0, ld1)


def test_float32_input_round_trip(transform, frames):
    y, _ = transform.from_cartesian(frames[:100].float())
    assert y.dtype == torch.float32 and torch.isfinite(y).all()
    x, logdet = transform.to_cartesian(y)
    assert x.dtype == torch.float32 and x.shape == (100, 22, 3) and logdet.shape == (100,)
    # float32 costs precision, not correctness: the same coordinates and internal geometry as float64
    y64, _ = transform.from_cartesian(frames[:100])
    assert (y.double() - y64).abs().max() < 1e-3
    for before, after in zip(transform.internal_coordinates(frames[:100]), transform.internal_coordinates(x.double())):
        assert _wrap(after - before).abs().max() < 1e-5  # nm and rad


def test_fix_constrained_keeps_bonds(frames, molecule):
    t = MixedCoordinateTransform.fit(frames, molecule, fix_constrained=True)
    # all 12 constrained bonds are fixed z-matrix bonds (HA left the rigid block)
    assert t.n_dims == 48 and len(t.fixed_rows) == 12
    y0, _ = t.from_cartesian(frames[:300])
    y = y0 + 0.5 * torch.randn(y0.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    y = y[t.in_domain(y)]
    x, _ = t.to_cartesian(y)
    lengths = constrained_bonds(molecule)
    pairs = [tuple(sorted(t.z_matrix[i][:2])) for i in t.fixed_rows]
    assert set(pairs) == set(lengths)
    dist = (x[:, [i for i, _ in pairs]] - x[:, [j for _, j in pairs]]).norm(dim=-1)
    assert (dist - torch.tensor([lengths[p] for p in pairs], dtype=torch.float64)).abs().max() < 1e-9
    assert (t.from_cartesian(x)[0] - y).abs().max() < 1e-6


def test_sparsest_cut_lands_in_gap():
    g = torch.Generator().manual_seed(3)
    torsions = torch.cat([0.3 * torch.randn(2000, 1, generator=g), 2.0 + 0.2 * torch.randn(500, 1, generator=g)])
    torsions = _wrap(torsions.to(torch.float64))
    cut = _sparsest_cut(torsions, 36)[0].item()
    # The gap runs from about 2.6 through pi to about -0.9; the cut must be inside it.
    assert cut > 2.7 or cut < -1.0


def test_logit_torsions_keep_their_plain_std(transform, frames):
    u, _ = transform._torsion_to_flow(transform.internal_coordinates(frames)[2], standardize=False)
    assert torch.allclose(transform.torsion_std, u.std(0).clamp_min(1e-4))  # the paper's kinds: no widening


def test_a_rare_far_basin_is_kept_inside_the_spline_domain():
    g = torch.Generator().manual_seed(4)
    one = 0.4 * torch.randn(20000, 1, generator=g, dtype=torch.float64)
    # 2 % of the frames in a second basin 2.4 rad (6 stds of the first) away, as phi > 0 at 300 K
    two = torch.cat([one[:19600], -2.4 + 0.1 * torch.randn(400, 1, generator=g, dtype=torch.float64)])
    u = torch.cat([one, two], dim=1)
    mean, std = u.mean(0), u.std(0)
    scale = _narrow_scale(u, mean, std)
    assert scale[0] == std[0]  # one basin: its std stands
    y = (u - mean) / scale
    beyond = (y[:, 1].abs() > TORSION_REACH).double().mean()
    assert beyond <= 1e-3 < (y[:, 1].abs() > 0.99 * TORSION_REACH).double().mean()
    assert ((u[:, 1] - mean[1]) / std[1]).abs().max() > 5.0  # without the widening: beyond the splines' +-5


def test_bad_input(transform, molecule):
    with pytest.raises(InputError):
        transform.from_cartesian(torch.zeros(3, 21, 3))
    with pytest.raises(InputError):
        transform.to_cartesian(torch.zeros(3, 59))
    with pytest.raises(InputError):
        MixedCoordinateTransform.fit(np.zeros((5, 22, 3)), molecule)
    with pytest.raises(InputError):
        MixedCoordinateTransform([[0, 1, 2, 3]], [1, 2, 3], n_atoms=5)


def test_no_constrained_pair_is_left_as_a_flow_dimension(frames, molecule):
    """From the OpenMM system's constraints: none is a free bond, none has both atoms in the rigid block."""
    pairs = constrained_bonds(molecule)
    assert len(pairs) == 12
    t = MixedCoordinateTransform.fit(frames, molecule, fix_constrained=True)
    free_bonds = {tuple(sorted(t.z_matrix[i][:2])) for i in range(t.n_ic) if i not in t.fixed_rows}
    block = set(t.rigid_block)
    assert not [p for p in pairs if p in free_bonds]
    assert not [p for p in pairs if set(p) <= block]
    assert t.free_constrained_pairs(pairs) == []
    assert t.n_dims == 48 and len(t.fixed_rows) == 12 and t.n_rigid_dims == 6
    # the paper's layout keeps all 12 as flow dimensions: 11 bonds and CA-HA inside the block
    paper = MixedCoordinateTransform.fit(frames, molecule)
    assert paper.n_dims == 60 and len(paper.free_constrained_pairs(pairs)) == 12


def test_circular_torsions_round_trip_and_are_chosen_from_the_data(frames, molecule):
    t = MixedCoordinateTransform.fit(frames, molecule, fix_constrained=True, torsions="circular")
    rows = [tuple(t.z_matrix[i]) for i in range(t.n_ic) if bool(t.torsion_circular[i])]
    # methyl rotors go around at 600 K; "relative" torsions such as H2 given H1 are narrow
    assert (0, 1, 4, 6) in rows and (19, 18, 16, 14) in rows
    assert (2, 1, 4, 0) not in rows and (20, 18, 16, 19) not in rows
    y, logdet = t.from_cartesian(frames)
    assert t.in_domain(y).all()
    circ = t.circular_mask
    assert int(circ.sum()) == len(rows) and y[:, circ].abs().max() <= math.pi
    narrow_cols = t.n_free_bonds + t.n_ic + (~t.torsion_circular).nonzero().flatten()
    assert torch.quantile(y[:, narrow_cols].abs(), 0.99, dim=0).max() <= TORSION_REACH  # inside the splines
    back, logdet_back = t.to_cartesian(y)
    assert torch.allclose(logdet, -logdet_back, atol=1e-8)
    assert t.reconstruction_error(frames).max() < 1e-5  # fixed bonds: data deviate by ~1e-7 nm
    # a circular torsion moved by 2 pi is the same structure
    moved = y.clone()
    moved[:, circ] += 2 * math.pi
    assert torch.allclose(t.to_cartesian(moved)[0], back, atol=1e-9)
    # a narrow torsion pushed across its cut leaves the domain
    narrow = (~t.torsion_circular).nonzero()[0].item()
    col = t.n_free_bonds + t.n_ic + narrow
    far = y[:3].clone()
    far[:, col] = (math.pi + 0.1 - t.torsion_mean[narrow]) / t.torsion_std[narrow]
    assert not t.in_domain(far).any()
