"""`bgp4 merge`: data files of one target in one training file; bad input refused with nothing written."""

from __future__ import annotations

import mdtraj
import numpy as np
import pytest

from bgp4.simulation.data import load_trajectory, md_energy_evaluations, read_settings
from bgp4.simulation.md import MDSettings, simulate


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Three short plain-MD files of alanine dipeptide: two at 600 K (one with 2 replicas), one at 500 K."""
    folder = tmp_path_factory.mktemp("merge")
    base = MDSettings(frames=60, save_every=20, equilibration_ps=0.1, replicas=1, seed=3)
    files = {
        "a": (folder / "a.h5", MDSettings(**{**base.__dict__, "replicas": 2})),
        "b": (folder / "b.h5", base),
        "cold": (folder / "cold.h5", MDSettings(**{**base.__dict__, "temperature": 500.0})),
    }
    for path, settings in files.values():
        simulate(path, settings, progress=False)
    return {name: path for name, (path, _) in files.items()}


def test_merge_concatenates_frames_and_records_its_sources(small, cli, tmp_path):
    out = tmp_path / "ab.h5"
    done = cli("merge", out, small["a"], small["b"])
    assert done.returncode == 0, done.stderr
    merged, a, b = (load_trajectory(p, extras=("replica",)) for p in (out, small["a"], small["b"]))
    np.testing.assert_array_equal(merged.xyz, np.concatenate([a.xyz, b.xyz]))
    np.testing.assert_allclose(merged.energies, np.concatenate([a.energies, b.energies]), rtol=1e-6)
    # a's two replicas stay 0 and 1, b's one becomes 2: block errors stay within one time series
    assert sorted(set(merged.extras["replica"])) == [0, 1, 2]
    assert list(merged.extras["replica"][a.n_frames :]) == [2] * b.n_frames
    settings = read_settings(out)
    assert settings["method"] == "merged" and settings["frames"] == 120 and "save_every" not in settings
    assert [s["frames"] for s in settings["merged_from"]] == [60, 60]
    total = md_energy_evaluations(read_settings(small["a"]), 60) + md_energy_evaluations(read_settings(small["b"]), 60)
    assert md_energy_evaluations(settings, 120) == total
    assert mdtraj.load(str(out)).n_frames == 120  # a plain mdtraj file
    assert merged.molecule().name == a.molecule().name


@pytest.mark.parametrize(
    "case, message",
    [
        ("one input", "at least two input files"),
        ("twice", "given twice"),
        ("out is an input", "is one of the inputs"),
        ("out exists", "exists; use --overwrite"),
        ("temperatures", "different temperatures"),
        ("missing", "data file not found"),
    ],
)
def test_bad_input_exits_2_with_nothing_written(small, cli, tmp_path, case, message):
    out = tmp_path / "m.h5"
    a, b = small["a"], small["b"]
    args = {
        "one input": [out, a],
        "twice": [out, a, a],
        "out is an input": [b, a, b],
        "out exists": [out, a, b],
        "temperatures": [out, a, small["cold"]],
        "missing": [out, a, tmp_path / "none.h5"],
    }[case]
    if case == "out exists":
        out.write_text("keep me")
    before = {p: p.stat().st_mtime_ns for p in small.values()}
    done = cli("merge", *args)
    assert done.returncode == 2 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert (out.read_text() == "keep me") if case == "out exists" else not out.exists()
    assert {p: p.stat().st_mtime_ns for p in small.values()} == before
    assert not list(tmp_path.glob("*.tmp*"))


def test_overwrite_replaces_an_existing_output(small, cli, tmp_path):
    out = tmp_path / "m.h5"
    out.write_text("old")
    assert cli("merge", out, small["a"], small["b"], "--overwrite").returncode == 0
    assert load_trajectory(out).n_frames == 120
