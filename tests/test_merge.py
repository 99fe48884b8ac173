"""`bgp4 merge`: data files of one target in one training file; bad input refused with nothing written."""

from __future__ import annotations

from types import SimpleNamespace

import mdtraj
import numpy as np
import pytest

from bgp4.simulation.data import load_trajectory, md_energy_evaluations, read_settings, write_trajectory


def _fake(path, source, rows: slice, replica=None, **settings):
    """A data file of `source`'s frames (nm) and energies (kJ/mol) with its settings changed: made
    in milliseconds, no MD."""
    chunk = {"coordinates": source.xyz[rows], "potentialEnergy": source.energies[rows].astype(np.float32)}
    extras = None if replica is None else {"replica": replica}
    write_trajectory(path, source.topology, [chunk], {**source.settings, **settings}, extras=extras)
    return path


@pytest.fixture(scope="module")
def small(md_file, tmp_path_factory):
    """Data files of alanine dipeptide at 600 K built from `md_file`'s frames: a (60 frames of 2
    replicas), b (60 of one), and files that must not merge with them: cold (500 K), free (another
    system: no constraints), samples (a generator's samples file) and plain (no bgp4 settings)."""
    folder = tmp_path_factory.mktemp("merge")
    md = load_trajectory(md_file, extras=("replica",))
    two = np.repeat([0, 1], 30).astype(np.int16)
    return {
        "a": _fake(folder / "a.h5", md, slice(0, 60), replica=two, frames=60),
        "b": _fake(folder / "b.h5", md, slice(60, 120), replica=np.zeros(60, np.int16), frames=60, replicas=1),
        "cold": _fake(folder / "cold.h5", md, slice(0, 60), frames=60, temperature=500.0),
        "free": _fake(folder / "free.h5", md, slice(0, 60), frames=60, constraints="none"),
        "samples": _fake(folder / "samples.h5", md, slice(0, 60), kind="samples"),
        "plain": _fake(folder / "plain.h5", SimpleNamespace(**{**md.__dict__, "settings": {}}), slice(0, 60)),
    }


def test_merge_concatenates_frames_and_records_its_sources(small, cli, tmp_path):
    out = tmp_path / "ab.h5"
    done = cli("merge", out, small["a"], small["b"])
    assert done.returncode == 0, done.stderr
    merged, a, b = (load_trajectory(p, extras=("replica",)) for p in (out, small["a"], small["b"]))
    np.testing.assert_array_equal(merged.xyz, np.concatenate([a.xyz, b.xyz]))
    np.testing.assert_allclose(merged.energies, np.concatenate([a.energies, b.energies]), rtol=1e-6)
    # a's two replicas stay 0 and 1, b's one becomes 2: block errors stay within one time series
    np.testing.assert_array_equal(merged.extras["replica"], np.concatenate([a.extras["replica"], [2] * b.n_frames]))
    settings = read_settings(out)
    assert settings["method"] == "merged" and settings["frames"] == 120 and "save_every" not in settings
    assert [(s["path"], s["frames"], s["method"]) for s in settings["merged_from"]] == [
        (str(small["a"]), 60, "md"),
        (str(small["b"]), 60, "md"),
    ]
    assert "timestep_fs" not in settings and "seed" not in settings  # how one input was made
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
        ("system", "of different molecules (constraints"),
        ("samples", "is no bgp4 MD data file (kind: samples)"),
        ("plain mdtraj", "is no bgp4 MD data file (kind: none recorded)"),
        ("temporary name", "(or its temporary file) is one of the inputs"),
        ("not .h5", "ending in .h5"),
        ("directory input", "is a directory, not a data file"),
    ],
)
def test_bad_input_exits_2_with_nothing_written(small, cli, tmp_path, case, message):
    out = tmp_path / "m.h5"
    a, b = small["a"], small["b"]
    twin = tmp_path / "m.tmp.h5"  # named as OUT's temporary file
    twin.write_bytes(b.read_bytes())
    args = {
        "one input": [out, a],
        "twice": [out, a, a],
        "out is an input": [b, a, b],
        "out exists": [out, a, b],
        "temperatures": [out, a, small["cold"]],
        "missing": [out, a, tmp_path / "none.h5"],
        "system": [out, a, small["free"]],
        "samples": [out, a, small["samples"]],
        "plain mdtraj": [out, a, small["plain"]],
        "temporary name": [out, a, twin],
        "not .h5": [tmp_path / "m.txt", a, b],
        "directory input": [out, a, a.parent / "a-directory.h5"],
    }[case]
    (a.parent / "a-directory.h5").mkdir(exist_ok=True)
    if case == "out exists":
        out.write_text("keep me")
    before = {p: p.stat().st_mtime_ns for p in [*small.values(), twin]}
    done = cli("merge", *args)
    assert done.returncode == 2 and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert (out.read_text() == "keep me") if case == "out exists" else not out.exists()
    assert {p: p.stat().st_mtime_ns for p in [*small.values(), twin]} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {"m.tmp.h5", *(["m.h5"] if case == "out exists" else [])}
    )


def test_overwrite_replaces_an_existing_output(small, cli, tmp_path):
    out = tmp_path / "m.h5"
    out.write_text("old")
    assert cli("merge", out, small["a"], small["b"], "--overwrite").returncode == 0
    assert load_trajectory(out).n_frames == 120
