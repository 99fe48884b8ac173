"""run/scripts/metad_phi.py: P(phi > 0) from a metadynamics free energy, and a walk that stops and
goes on (OpenMM's Metadynamics on the Reference platform)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _scripts import load_script

from bgp4._io import exclusive
from bgp4.errors import InputError
from bgp4.simulation.data import load_trajectory
from bgp4.simulation.molecule import kT


def _metad_script():
    return load_script("run/scripts/metad_phi.py")


def test_p_phi_positive_of_a_grid_free_energy():
    """The share of exp(-F / kT) at phi > 0 on OpenMM's grid (axis 1: phi; linspace(-pi, pi, n), the
    last point repeating the first and counted once), whatever psi does; points on phi = 0 and
    -180 degrees count half."""
    metad = _metad_script()
    kt, n = 2.5, 91  # an odd n puts a point on phi = 0
    axis = np.linspace(-np.pi, np.pi, n)
    psi, phi = np.meshgrid(axis, axis, indexing="ij")
    f = kt * (2.0 * np.cos(phi + 0.7) + np.sin(psi) ** 2)  # kJ/mol: the psi term factors out
    marginal = np.exp(-2.0 * np.cos(axis[:-1] + 0.7))
    weight = np.where(axis[:-1] > 0, 1.0, 0.0)
    weight[[0, (n - 1) // 2]] = 0.5
    assert axis[(n - 1) // 2] == pytest.approx(0.0)
    assert metad.p_phi_positive(f, kt) == pytest.approx((marginal * weight).sum() / marginal.sum())
    assert metad.p_phi_positive(np.zeros((n, n)), kt) == pytest.approx(0.5)
    assert metad.p_phi_positive(f + 100.0, kt) == pytest.approx(metad.p_phi_positive(f, kt))
    shifted = kt * 2.0 * np.cos(phi - 0.7)  # the mirror image: P and 1 - P
    assert metad.p_phi_positive(shifted, kt) == pytest.approx(1.0 - metad.p_phi_positive(f - kt * np.sin(psi) ** 2, kt))


def _args(**changes) -> argparse.Namespace:
    base = dict(ns=0.01, seed=3, bias_factor=6.0, height=1.0, width=20.0, pace=100, chunk_ps=5.0)
    return argparse.Namespace(**{**base, **changes})


def test_a_walk_goes_on_after_a_stop_and_other_settings_are_refused(md_file, tmp_path):
    """Two chunks, then the same run asked for four: it goes on from its state and bias (one bias
    file per start, the first one's Gaussians kept), P after every chunk in [0, 1]; a run of other
    settings in the same folder is refused, and so are chunks without a record."""
    metad = _metad_script()
    data = load_trajectory(md_file)
    work = tmp_path / "walk"
    p, history = metad.run(data, work, _args())
    assert len(history) == 2 and 0.0 <= p <= 1.0
    first_bias = {f.name: np.load(f) for f in (work / "bias").glob("bias_*.npy")}
    assert len(first_bias) == 1 and next(iter(first_bias.values())).max() > 0
    p, history2 = metad.run(data, work, _args(ns=0.02))
    assert history2[:2] == history and len(history2) == 4
    assert all(0.0 <= h[1] <= 1.0 for h in history2) and history2[-1][0] == pytest.approx(0.02)
    cv = [np.load(work / f"cv-{i:05d}.npz")["phi_psi"] for i in range(4)]
    assert all(c.shape == (5, 2) and np.all(np.abs(c) <= np.pi) for c in cv)
    files = [np.load(f) for f in (work / "bias").glob("bias_*.npy")]
    assert len(files) == 2
    for name, bias in first_bias.items():
        np.testing.assert_array_equal(np.load(work / "bias" / name), bias)
    total = sum(files)  # OpenMM's grid repeats its first point at the end of each axis
    np.testing.assert_allclose(total[:, -1], total[:, 0])
    np.testing.assert_allclose(total[-1], total[0])
    # the go-on walk's P is that of both starts' Gaussians together: the first's bias was loaded
    bias_factor, kt = 6.0, kT(data.settings["temperature"])
    assert p == pytest.approx(metad.p_phi_positive(-bias_factor / (bias_factor - 1.0) * total, kt), rel=1e-7)
    with pytest.raises(InputError, match="whole ps and whole paces"):
        metad.run(data, tmp_path / "odd", _args(pace=300, chunk_ps=1.0))
    assert not (tmp_path / "odd").exists()
    record = json.loads((work / "metad.json").read_text())
    assert record["pace"] == 100 and record["data"]["temperature"] == data.settings["temperature"]
    with pytest.raises(InputError, match="other settings"):
        metad.run(data, work, _args(pace=500))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "cv-00000.npz").write_bytes(b"")
    with pytest.raises(InputError, match="without a record"):
        metad.run(data, tmp_path / "old", _args())


SCRIPTS = [
    ("metad_phi.py", ["--ns", "0.01"], "cv-00000.npz"),
    ("umbrella_phi.py", ["--windows", "1", "--ps", "2"], "window-000.npz"),
]


def _run_script(script: str, md_file: Path, work: Path, short: list[str]) -> subprocess.CompletedProcess:
    path = Path(__file__).resolve().parents[1] / "run" / "scripts" / script
    command = [sys.executable, str(path), str(md_file), "--out", str(work), *short]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("script, short, chunk", SCRIPTS)
def test_a_second_run_on_a_work_folder_in_use_stops_with_one_line(md_file, tmp_path, script, short, chunk):
    work = tmp_path / "walk"
    with exclusive(work):  # short runs, so that a lock that failed would not hang the test
        done = _run_script(script, md_file, work, short)
    assert done.returncode == 2 and "is in use by bgp4 process" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not work.exists()


@pytest.mark.parametrize("script, short, chunk", SCRIPTS)
def test_a_work_folder_of_no_known_run_is_refused_with_one_line(md_file, tmp_path, script, short, chunk):
    work = tmp_path / "walk"
    work.mkdir()
    (work / chunk).write_bytes(b"")  # a chunk without its run's settings record
    done = _run_script(script, md_file, work, short)
    assert done.returncode == 2 and "without a record" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and sorted(p.name for p in work.iterdir()) == [chunk]
