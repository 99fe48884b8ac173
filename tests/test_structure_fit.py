"""A coordinate transform fitted to the minimized structure and the force field (no MD frames):
the bonded energy against OpenMM, round trips near the structure, harmonic widths, which torsions
go around, the rigid block's PCA, and a generator built on it."""

from __future__ import annotations

import math

import numpy as np
import openmm
import pytest
import torch

from bgp4.errors import InputError
from bgp4.flows.structure_fit import BondedEnergy, fit_to_structure
from bgp4.generator.model import build_generator, load_generator
from bgp4.simulation.molecule import kT
from bgp4.simulation.structure import minimize

#: Rows of alanine dipeptide's hand z-matrix whose torsion turns a whole group: phi, psi, the three
#: methyl rotors (the first hydrogen of each; the other two follow it as siblings).
ROTATABLE = {(4, 6, 8, 14), (16, 14, 8, 6), (0, 1, 4, 6), (11, 10, 8, 6), (19, 18, 16, 14)}


@pytest.fixture(scope="module")
def structure(molecule) -> np.ndarray:
    return minimize(molecule.system, molecule.positions)[0]


@pytest.fixture(scope="module")
def fitted(molecule, structure):
    """{(torsions, fix_constrained): transform at 600 K}."""
    return {
        (mode, fix): fit_to_structure(molecule, 600.0, structure, fix_constrained=fix, torsions=mode)
        for mode in ("logit", "circular")
        for fix in (True, False)
    }


def _rigid_motion(x: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    q = q * torch.sign(torch.linalg.det(q))
    return x @ q.T + torch.randn(3, generator=g, dtype=torch.float64)


def test_bonded_energy_matches_openmm(molecule, structure):
    system = openmm.XmlSerializer.deserialize(molecule.system_xml())  # a copy: force groups change
    bonded = (openmm.HarmonicBondForce, openmm.HarmonicAngleForce, openmm.PeriodicTorsionForce)
    for force in system.getForces():
        force.setForceGroup(1 if isinstance(force, bonded) else 0)
    context = openmm.Context(system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    rng = np.random.default_rng(0)
    frames = structure + 0.01 * rng.standard_normal((4, *structure.shape))
    expected = []
    for x in frames:
        context.setPositions(x)
        state = context.getState(getEnergy=True, groups={1})
        expected.append(state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole))
    energy = BondedEnergy.of_system(molecule.system)(torch.as_tensor(frames))
    np.testing.assert_allclose(energy.numpy(), expected, rtol=1e-7, atol=1e-6)


@pytest.mark.parametrize("mode", ["logit", "circular"])
def test_round_trip_near_the_structure(fitted, structure, mode):
    free = fitted[(mode, False)]
    y0, _ = free.from_cartesian(torch.as_tensor(structure)[None])
    assert y0.abs().max() < 1e-6  # the structure is the centre of every coordinate
    # frames near the structure: every atom moved by ~0.01 nm, then the whole molecule moved
    noise = 0.01 * torch.randn((64, *structure.shape), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x = _rigid_motion(torch.as_tensor(structure) + noise, seed=2)
    assert free.reconstruction_error(x).max() < 1e-5
    # with the constrained bonds fixed, frames that keep them: the transform's own, moved rigidly
    fixed = fitted[(mode, True)]
    y = torch.randn(64, fixed.n_dims, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    x = _rigid_motion(fixed.to_cartesian(y)[0], seed=4)
    assert fixed.reconstruction_error(x).max() < 1e-5
    back, logdet = fixed.from_cartesian(x)
    assert fixed.in_domain(back).all() and (back - y).abs().max() < 1e-6
    assert torch.allclose(logdet, -fixed.to_cartesian(y)[1], atol=1e-8)


def test_rotatable_torsions_go_around(fitted):
    circular = fitted[("circular", True)]
    around = {tuple(circular.z_matrix[i]) for i in range(circular.n_ic) if circular.torsion_circular[i]}
    assert around == ROTATABLE  # not the amide torsions, not the sibling (improper-style) ones
    assert int(circular.circular_mask.sum()) == len(ROTATABLE)
    logit = fitted[("logit", True)]
    assert not logit.torsion_circular.any()  # the paper's kinds keep every torsion in its cut
    wide = torch.tensor([tuple(row) in ROTATABLE for row in logit.z_matrix])
    assert torch.allclose(logit.torsion_std[wide], torch.tensor(math.pi / math.sqrt(3.0), dtype=torch.float64))
    # the narrow ones: the same width in rad in both modes (du/dt = 2 / pi at the logit's centre)
    assert torch.allclose(logit.torsion_std[~wide] * math.pi / 2, circular.torsion_std[~wide])
    assert (circular.torsion_std[~wide] < 0.5).all()


def test_widths_are_harmonic_at_the_temperature(molecule, structure, fitted):
    t = fitted[("circular", True)]
    row = [list(r) for r in t.z_matrix].index([4, 6, 8, 14])  # C-N: stretching it moves ACE rigidly
    k = next(b[3] for b in BondedEnergy.of_system(molecule.system).bonds.tolist() if {b[0], b[1]} == {4.0, 6.0})
    free = [i for i in range(t.n_ic) if i not in t.fixed_rows]
    assert t.bond_std[free.index(row)].item() == pytest.approx(math.sqrt(kT(600.0) / k), rel=1e-6)
    cold = fit_to_structure(molecule, 150.0, structure, fix_constrained=True, torsions="circular")
    for name in ("bond_std", "angle_std", "pca_std"):  # sqrt(kT / k): half the width at a quarter of T
        assert torch.allclose(getattr(cold, name) * 2, getattr(t, name), rtol=1e-6), name
    assert torch.equal(cold.torsion_circular, t.torsion_circular)  # rotatable is a property of the bond


def test_rigid_block_pca_spans_its_internal_motions(fitted):
    t = fitted[("logit", True)]
    v, ref = t.pca_vectors, t.rigid_ref
    assert torch.allclose(v.T @ v, torch.eye(t.n_rigid_dims, dtype=torch.float64), atol=1e-10)
    eye = torch.eye(3, dtype=torch.float64)
    moves = [eye[k].repeat(len(ref)) for k in range(3)]
    moves += [torch.linalg.cross(eye[k].expand_as(ref), ref).reshape(-1) for k in range(3)]
    assert (torch.stack(moves) @ v).abs().max() < 1e-10  # no translation, no rotation
    assert (t.pca_eigenvalues[-6:] == 0).all() and (t.pca_std > 0).all()
    assert torch.allclose(t.pca_std.square(), t.pca_eigenvalues[: t.n_rigid_dims])


def test_generator_built_on_the_structure(molecule, tmp_path):
    torch.manual_seed(0)
    bg = build_generator("spline", None, molecule, blocks=1, hidden=16, temperature=600.0)
    assert bg.config["fitted_to"] == "structure" and bg.config["fit_temperature"] == 600.0
    assert bg.n_dims == 48 and int(bg.circular_latent.sum()) == len(ROTATABLE)
    with torch.no_grad():
        sample = bg.sample(64)
        assert sample.ok.all() and torch.isfinite(sample.log_q).all()
        assert torch.allclose(bg.log_prob(sample.x), sample.log_q, atol=1e-3)
        bg.save(tmp_path / "model.pt")
        again = load_generator(tmp_path / "model.pt")
        assert torch.equal(again.log_prob(sample.x), bg.log_prob(sample.x))
    with pytest.raises(InputError, match="or a temperature"):
        build_generator("rnvp", None, molecule)
    with pytest.raises(InputError, match="temperature must be positive"):
        fit_to_structure(molecule, 0.0)
