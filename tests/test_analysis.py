"""Known-answer tests for the sample-quality metrics (bgp4.analysis)."""
from __future__ import annotations

import json
import math

import mdtraj
import numpy as np
import pytest

from bgp4 import analysis
from bgp4.errors import InputError
from bgp4.molecule import PHI, PSI


@pytest.fixture(scope="module")
def md_angles(md_frames, molecule):
    frames, _ = md_frames
    return analysis.backbone_dihedrals(frames, molecule)


def test_backbone_dihedrals_match_mdtraj(md_frames, molecule):
    frames, _ = md_frames
    phi, psi = analysis.backbone_dihedrals(frames[:200], molecule)
    direct = mdtraj.compute_dihedrals(mdtraj.Trajectory(frames[:200], molecule.topology), [PHI, PSI])
    np.testing.assert_allclose(phi, direct[:, 0], atol=1e-6)
    np.testing.assert_allclose(psi, direct[:, 1], atol=1e-6)
    assert phi.dtype == np.float64 and phi.shape == (200,)
    assert np.all(np.abs(phi) <= np.pi) and np.all(np.abs(psi) <= np.pi)
    # A topology works as well as a Molecule, and a single frame as well as a batch.
    phi_one, _ = analysis.backbone_dihedrals(frames[0], molecule.topology)
    assert phi_one[0] == pytest.approx(phi[0])


def test_backbone_dihedrals_reject_bad_shape(molecule):
    with pytest.raises(InputError, match="xyz must have shape"):
        analysis.backbone_dihedrals(np.zeros((3, 21, 3)), molecule)
    with pytest.raises(InputError, match="Molecule or mdtraj.Topology"):
        analysis.backbone_dihedrals(np.zeros((3, 22, 3)), "not a topology")


def test_energy_shift_and_low_energy_fraction():
    u = np.array([1.0, 2.0, 3.0, 4.0])
    assert analysis.energy_shift(u, u) == 0.0
    # Non-finite model energies are ignored in the mean.
    assert analysis.energy_shift(np.array([3.5, np.inf, np.nan]), u) == pytest.approx(1.0)
    assert math.isnan(analysis.energy_shift(np.array([np.nan]), u))
    assert analysis.low_energy_fraction(np.array([0.0, 1.0, 2.0, 5.0, np.inf, np.nan, -np.inf, 1.9]), 2.0) == 3 / 8
    assert analysis.low_energy_threshold(np.array([1.0, 7.0, np.nan])) == 7.0
    # The training set itself: everything but its maximum is strictly below the threshold.
    assert analysis.low_energy_fraction(u, analysis.low_energy_threshold(u)) == 0.75


def test_noisy_reference_statistics():
    xyz = np.zeros((2000, 22, 3))
    noisy = analysis.noisy_reference(xyz, rng=np.random.default_rng(0))
    assert noisy.shape == xyz.shape
    assert np.std(noisy) == pytest.approx(0.004, rel=0.02)
    assert abs(np.mean(noisy)) < 1e-4
    np.testing.assert_array_equal(analysis.noisy_reference(xyz[:3], rng=5), analysis.noisy_reference(xyz[:3], rng=5))
    with pytest.raises(InputError):
        analysis.noisy_reference(xyz, sigma=-1.0)


def test_reverse_ess_known_answers():
    assert analysis.reverse_ess(np.zeros(100)) == pytest.approx(1.0)
    # Equal weights at a huge log scale must not overflow.
    assert analysis.reverse_ess(np.full(10, 5000.0)) == pytest.approx(1.0)
    dominant = np.full(1000, -1e4)
    dominant[3] = 1e4
    assert analysis.reverse_ess(dominant) == pytest.approx(1e-3)
    # Half the samples with weight zero: ESS/N = 1/2.
    half = np.concatenate([np.zeros(50), np.full(50, -np.inf)])
    assert analysis.reverse_ess(half) == pytest.approx(0.5)
    assert analysis.reverse_ess(np.full(5, -np.inf)) == 0.0
    assert analysis.reverse_ess(np.full(5, np.nan)) == 0.0
    assert math.isnan(analysis.reverse_ess(np.zeros(0)))
    # Two weights 1 and e: (1 + e)^2 / (1 + e^2) / 2.
    expected = (1 + math.e) ** 2 / (1 + math.e**2) / 2
    assert analysis.reverse_ess(np.array([0.0, 1.0])) == pytest.approx(expected)


def test_log_weights_with_infinite_energy():
    u = np.array([1.0, np.inf, 2.0, np.nan])
    log_q = np.array([-1.0, 0.0, np.nan, 0.5])
    log_w = analysis.log_weights(u, log_q)
    assert log_w[0] == 0.0
    assert np.all(np.isneginf(log_w[1:]))
    assert analysis.reverse_ess(log_w) == pytest.approx(0.25)
    w = analysis.normalized_weights(log_w)
    np.testing.assert_array_equal(w, [1.0, 0.0, 0.0, 0.0])
    with pytest.raises(InputError, match="same length"):
        analysis.log_weights(np.zeros(3), np.zeros(4))


def test_normalized_weights_are_stable():
    w = analysis.normalized_weights(np.array([-3000.0, -3000.0 + math.log(3.0), np.nan, -np.inf]))
    np.testing.assert_allclose(w, [0.25, 0.75, 0.0, 0.0])
    np.testing.assert_array_equal(analysis.normalized_weights(np.full(3, -np.inf)), np.zeros(3))


def test_ramachandran_histogram_is_a_density():
    rng = np.random.default_rng(1)
    phi, psi = rng.uniform(-np.pi, np.pi, (2, 5000))
    density = analysis.ramachandran_histogram(phi, psi, bins=16)
    assert density.shape == (16, 16)
    area = (2 * np.pi / 16) ** 2
    assert density.sum() * area == pytest.approx(1.0)
    # Samples exactly on the upper edge fall in the last bin rather than being dropped.
    edge = analysis.ramachandran_histogram(np.array([np.pi]), np.array([-np.pi]), bins=4)
    assert edge[3, 0] > 0
    assert not analysis.ramachandran_histogram(np.array([np.nan]), np.array([0.0])).any()
    with pytest.raises(InputError, match=">= 0"):
        analysis.ramachandran_histogram(phi, psi, weights=np.full(5000, -1.0))


def test_ramachandran_kl(md_angles):
    phi, psi = md_angles
    assert analysis.ramachandran_kl(phi, psi, phi, psi) == pytest.approx(0.0, abs=1e-12)
    rng = np.random.default_rng(2)
    uniform = rng.uniform(-np.pi, np.pi, (2, 3000))
    kl_uniform = analysis.ramachandran_kl(phi, psi, *uniform)
    assert kl_uniform > 0.5
    # A model that covers only part of the MD support is penalised much harder (eps floor).
    half = phi < np.median(phi)
    assert analysis.ramachandran_kl(phi, psi, phi[half], psi[half]) > 1.0
    # Weights that switch off the missing half reproduce the same value.
    weights = half.astype(float)
    assert analysis.ramachandran_kl(phi, psi, phi, psi, weights=weights) == pytest.approx(
        analysis.ramachandran_kl(phi, psi, phi[half], psi[half]))
    assert math.isnan(analysis.ramachandran_kl(phi, psi, np.zeros(0), np.zeros(0)))


def test_ramachandran_kl_of_disjoint_point_masses():
    # p and q put all mass in different single bins; with density floor eps the sum reduces to
    # area * (B - eps) * ln(B / eps) = ln(B / eps), B = 1/area + eps.
    bins, eps = 8, 1e-10
    area = (2 * np.pi / bins) ** 2
    zero = np.array([0.1])
    kl = analysis.ramachandran_kl(np.array([0.1]), zero, np.array([2.0]), zero, bins=bins, eps=eps)
    assert kl == pytest.approx(math.log((1 / area + eps) / eps), rel=1e-9)


def test_free_energy_of_uniform_is_flat():
    rng = np.random.default_rng(3)
    angle = rng.uniform(-np.pi, np.pi, 200_000)
    centers, free = analysis.free_energy_1d(angle, bins=32)
    assert centers.shape == free.shape == (32,)
    assert centers[0] == pytest.approx(-np.pi + np.pi / 32)
    assert np.nanmin(free) == 0.0
    assert np.nanmax(free) < 0.1


def test_free_energy_known_ratio_and_gaps():
    # Three times as many samples in the first bin: F difference ln 3; empty bins are nan.
    angle = np.array([-3.0, -3.0, -3.0, 3.0, np.nan])
    centers, free = analysis.free_energy_1d(angle, bins=4)
    assert free[0] == 0.0
    assert free[3] == pytest.approx(math.log(3.0))
    assert np.isnan(free[1]) and np.isnan(free[2])
    # Weights act like counts.
    _, weighted = analysis.free_energy_1d(np.array([-3.0, 3.0]), bins=4, weights=np.array([3.0, 1.0]))
    np.testing.assert_allclose(weighted, free, equal_nan=True)
    _, empty = analysis.free_energy_1d(np.zeros(0), bins=4)
    assert np.all(np.isnan(empty))


def test_summaries_are_json_ready(md_frames, md_angles):
    _, energies = md_frames
    u_md = energies / 4.98868
    phi, psi = md_angles
    threshold = analysis.low_energy_threshold(u_md)
    log_q = -u_md  # a perfect model: all weights equal
    u_model = u_md.copy()
    u_model[:10] = np.inf
    summary = analysis.summarize_model(u_model, log_q, phi, psi, u_md, phi, psi, threshold)
    json.dumps(summary)
    assert summary["n_samples"] == 3000 and summary["n_nonfinite"] == 10
    assert summary["energy_shift_kT"] == pytest.approx(u_md[10:].mean() - u_md.mean())
    assert summary["reverse_ess"] == pytest.approx(2990 / 3000)
    assert summary["n_zero_weight"] == 10
    assert summary["ramachandran_kl"] == pytest.approx(0.0, abs=1e-12)
    assert 0 < summary["ramachandran_kl_reweighted"] < 0.05
    assert summary["low_energy_fraction"] == pytest.approx(2989 / 3000, abs=1 / 3000)

    unweighted = analysis.summarize_model(u_model, None, phi, psi, u_md, phi, psi, threshold)
    assert unweighted["reverse_ess"] is None and unweighted["ramachandran_kl_reweighted"] is None

    empty = analysis.summarize_model(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), u_md, phi, psi, threshold)
    json.dumps(empty)
    assert empty["mean_energy_kT"] is None and empty["reverse_ess"] is None and empty["ramachandran_kl"] is None

    reference = analysis.summarize_reference(u_md, threshold, u_md_kT=u_md)
    json.dumps(reference)
    assert reference["energy_shift_kT"] == 0.0
    assert reference["median_energy_kT"] == pytest.approx(float(np.median(u_md)))
    assert analysis.summarize_reference(u_md, threshold)["energy_shift_kT"] is None


def test_noise_raises_the_energy(md_frames, molecule):
    """The paper's reference column: 0.004 nm noise lifts the mean energy by many kT."""
    import openmm

    frames, energies = md_frames
    noisy = analysis.noisy_reference(frames[:50], rng=0)
    context = openmm.Context(molecule.system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference"))
    noisy_energies = []
    for frame in noisy:
        context.setPositions(frame)
        state = context.getState(getEnergy=True)
        noisy_energies.append(state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole))
    shift = analysis.energy_shift(np.array(noisy_energies) / 4.98868, energies[:50] / 4.98868)
    assert shift > 5.0
