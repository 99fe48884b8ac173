"""Every residue's backbone torsions (bgp4.analysis.residues), the MD block error, the per-residue figure."""

from __future__ import annotations

import math

import mdtraj
import numpy as np
import pytest

from bgp4.analysis import estimators as analysis
from bgp4.analysis import plots
from bgp4.analysis.plots_residues import residue_ramachandran
from bgp4.analysis.residues import residue_dihedrals, residue_torsions
from bgp4.errors import InputError
from bgp4.simulation.molecule import get_molecule


@pytest.fixture(scope="module")
def tetrapeptide():
    return get_molecule("alanine-tetrapeptide")


def _jiggled(molecule, n, sigma=0.02, seed=0):
    """n copies of the molecule's structure with N(0, sigma^2) nm noise: torsions spread over a range."""
    rng = np.random.default_rng(seed)
    return molecule.positions[None] + rng.normal(0.0, sigma, (n, molecule.n_atoms, 3))


def test_alanine_dipeptide_has_one_residue_and_it_is_the_backbone_pair(molecule, md_frames):
    (residue,) = residue_torsions(molecule)
    assert residue.label == "ALA2" and residue.phi == tuple(molecule.phi) and residue.psi == tuple(molecule.psi)
    frames, _ = md_frames
    phi, psi = residue_dihedrals(frames[:300], molecule)
    assert phi.shape == psi.shape == (300, 1) and phi.dtype == np.float64
    own_phi, own_psi = analysis.backbone_dihedrals(frames[:300], molecule)
    np.testing.assert_array_equal(phi[:, 0], own_phi)
    np.testing.assert_array_equal(psi[:, 0], own_psi)


def test_tetrapeptide_residues_agree_with_mdtraj(tetrapeptide):
    residues = residue_torsions(tetrapeptide)
    assert [r.label for r in residues] == ["ALA2", "ALA3", "ALA4"]
    xyz = _jiggled(tetrapeptide, 50)
    phi, psi = residue_dihedrals(xyz, tetrapeptide)
    trajectory = mdtraj.Trajectory(xyz, tetrapeptide.topology)
    # mdtraj also lists the torsions of residues that lack the other one (none here: caps have neither)
    _, phi_md = mdtraj.compute_phi(trajectory)
    _, psi_md = mdtraj.compute_psi(trajectory)
    np.testing.assert_allclose(phi, phi_md, atol=1e-6)
    np.testing.assert_allclose(psi, psi_md, atol=1e-6)
    assert np.ptp(phi, axis=0).min() > 0.05  # the noise moved them: not a comparison of constants
    # the molecule's own pair is its central residue's
    central = residues[1]
    assert (central.phi, central.psi) == (tuple(tetrapeptide.phi), tuple(tetrapeptide.psi))
    np.testing.assert_array_equal(phi[:, 1], analysis.backbone_dihedrals(xyz, tetrapeptide)[0])


def test_a_molecule_without_backbone_has_no_residue(molecule):
    top = mdtraj.Topology()
    residue = top.add_residue("HOH", top.add_chain())
    for name in ("O", "H1", "H2"):
        top.add_atom(name, mdtraj.element.get_by_symbol(name[0]), residue)
    assert residue_torsions(top) == []
    phi, psi = residue_dihedrals(np.zeros((4, 3, 3)), top)
    assert phi.shape == psi.shape == (4, 0)
    with pytest.raises(InputError, match="xyz must have shape"):
        residue_dihedrals(np.zeros((4, 5, 3)), top)
    with pytest.raises(InputError, match="expected a bgp4 Molecule"):
        residue_torsions("alanine-dipeptide")


def test_block_standard_error_known_answers():
    rng = np.random.default_rng(1)
    white = rng.normal(0.0, 2.0, 40_000)
    # uncorrelated values: the error of the mean is sigma / sqrt(n)
    assert analysis.block_standard_error(white) == pytest.approx(2.0 / math.sqrt(white.size), rel=0.35)
    # a series that sits in one state for long stretches: blocks see it, the naive error does not
    sticky = np.repeat(rng.random(40) < 0.3, 1000).astype(float)
    naive = sticky.std() / math.sqrt(sticky.size)
    assert analysis.block_standard_error(sticky) > 5 * naive
    # blocks do not straddle replicas: two constant replicas make every block constant, and the
    # error that of the 20 block means (10 of 0, 10 of 1)
    two = np.concatenate([np.zeros(1000), np.ones(1000)])
    assert analysis.block_standard_error(two, groups=np.repeat([0, 1], 1000)) == pytest.approx(
        np.std(np.repeat([0.0, 1.0], 10), ddof=1) / math.sqrt(20)
    )
    assert math.isnan(analysis.block_standard_error(np.ones(1)))
    assert analysis.block_standard_error(np.array([1.0, np.nan, 1.0, 1.0]), n_blocks=2) == 0.0
    with pytest.raises(InputError, match="n_blocks"):
        analysis.block_standard_error(white, n_blocks=1)
    assert analysis.state_free_energy_error(0.5, 0.01) == pytest.approx(0.04)
    assert math.isnan(analysis.state_free_energy_error(0.0, 0.01))


@pytest.mark.slow
def test_residue_ramachandran_draws_a_row_per_residue(tmp_path, monkeypatch):
    figures = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or save(fig, path))
    rng = np.random.default_rng(2)
    centres = {"ALA2": (-1.5, 2.5), "ALA3": (-1.2, -0.6)}
    residues = {
        label: {
            "MD": (rng.normal(phi0, 0.3, 800), rng.normal(psi0, 0.3, 800), None),
            "model": (rng.normal(phi0, 0.5, 300), rng.normal(psi0, 0.5, 300), None),
        }
        for label, (phi0, psi0) in centres.items()
    }
    paths = residue_ramachandran(residues, tmp_path / "residues", bins=32)
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 1000 for p in paths)
    panels = [ax for ax in figures[0].axes if ax.get_visible() and ax.get_title()]
    assert [ax.get_title() for ax in panels] == [
        "ALA2: MD\n(n = 800)",
        "ALA2: model\n(n = 300)",
        "ALA3: MD\n(n = 800)",
        "ALA3: model\n(n = 300)",
    ]
    for ax, (phi0, psi0) in zip(panels[::2], centres.values()):  # each row peaks at its residue's basin
        mesh = ax.collections[0]
        density = mesh.get_array().reshape(32, 32)  # rows: psi, columns: phi
        row, col = np.unravel_index(np.argmax(density), density.shape)
        corners = mesh.get_coordinates()
        assert corners[row, col, 0] <= phi0 + 0.5 and corners[row, col + 1, 0] >= phi0 - 0.5
        assert corners[row, col, 1] <= psi0 + 0.5 and corners[row + 1, col, 1] >= psi0 - 0.5
    with pytest.raises(InputError):
        residue_ramachandran({}, tmp_path / "none")


@pytest.mark.slow
def test_tetrapeptide_report_has_every_residue(tmp_path):
    """simulate -> train (a few steps) -> sample -> analyze on the tetrapeptide: three residues, each
    with its states and TV; the central one's numbers are the flat single-pair keys."""
    from bgp4.generator.sample import SampleSettings, sample_run
    from bgp4.generator.train import TrainSettings, train
    from bgp4.report.analyze import analyze
    from bgp4.simulation.md import MDSettings, simulate

    data, run = tmp_path / "tetra.h5", tmp_path / "run"
    simulate(
        data, MDSettings(molecule="alanine-tetrapeptide", frames=600, equilibration_ps=1.0, replicas=2), progress=False
    )
    tiny = dict(blocks=1, hidden=16, batch=32, steps=20, energy_steps=2, eval_every=10, workers=1)
    train(TrainSettings(data=str(data), model="spline", **tiny), run, progress=False)
    sample_run(run, SampleSettings(n=200, batch=100, workers=1), progress=False)
    metrics = analyze(data, [run], tmp_path / "report", workers=1)
    model = metrics["models"]["run"]
    assert list(metrics["md"]["residues"]) == list(model["residues"]) == ["ALA2", "ALA3", "ALA4"]
    assert metrics["torsion_pair"] == "ALA3"
    central = model["residues"]["ALA3"]
    assert central == {k: model[k] for k in central}
    for residue in model["residues"].values():
        assert 0 < residue["ramachandran_tv"] <= 1 and residue["ramachandran_tv_floor"] > 0
        assert 0 <= residue["p_phi_positive"] <= 1
    assert (tmp_path / "report" / "ramachandran_residues.png").stat().st_size > 1000
    report = (tmp_path / "report" / "report.md").read_text()
    assert all(f"| {r} | Ramachandran TV (MD floor) |" in report for r in ("ALA2", "ALA3", "ALA4"))
    assert "ramachandran_residues.png" in report and "(phi and psi of ALA3)" in report
