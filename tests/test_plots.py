"""The figure functions write non-empty PNG and PDF files and survive awkward data."""
from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from bgp4 import analysis, plots
from bgp4.errors import InputError

RNG = np.random.default_rng(0)
PNG_MAGIC = b"\x89PNG"


def _check_written(paths, stem):
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    for p in paths:
        assert p.exists() and p.stat().st_size > 1000
        assert p.with_suffix("") == stem
    assert paths[0].read_bytes()[:4] == PNG_MAGIC
    assert paths[1].read_bytes()[:5] == b"%PDF-"


def _angles(n, centre):
    phi = np.angle(np.exp(1j * (centre[0] + 0.4 * RNG.standard_normal(n))))
    psi = np.angle(np.exp(1j * (centre[1] + 0.4 * RNG.standard_normal(n))))
    return phi, psi


def test_energy_violins(tmp_path):
    md = RNG.normal(-20.0, 4.0, 500)
    model = RNG.normal(-17.0, 5.0, 400)
    model[:5] = [np.inf, np.nan, 1e9, -np.inf, 1e30]
    columns = {"MD data": md, "MD + 0.004 nm": md + 13.0, "RNVP": model, "P4Inv": np.zeros(0),
               "one value": np.array([-10.0])}
    threshold = md.max()
    fractions = {k: analysis.low_energy_fraction(v, threshold) for k, v in columns.items()}
    stem = tmp_path / "energies"
    paths = plots.energy_violins(columns, fractions, stem, threshold=threshold)
    _check_written(paths, stem)
    # An explicit clip and a ".png" path work too.
    paths = plots.energy_violins(columns, fractions, tmp_path / "clipped.png", clip=(-40.0, 10.0))
    _check_written(paths, tmp_path / "clipped")
    with pytest.raises(InputError):
        plots.energy_violins({}, {}, tmp_path / "none")
    with pytest.raises(InputError, match="low < high"):
        plots.energy_violins(columns, fractions, tmp_path / "bad", clip=(1.0, 1.0))


def test_ramachandran_panels(tmp_path):
    md = _angles(2000, (-2.0, 2.5))
    model = _angles(1000, (-1.5, -0.5))
    weights = analysis.normalized_weights(RNG.normal(0.0, 3.0, 1000))
    panels = {"MD": (*md, None), "RNVP": (*model, None), "RNVP reweighted": (*model, weights),
              "P4Inv (empty)": (np.zeros(0), np.zeros(0), None),
              "NaN angles": (np.full(5, np.nan), np.full(5, np.nan), None)}
    stem = tmp_path / "sub" / "rama"
    _check_written(plots.ramachandran_panels(panels, stem, bins=32), stem)
    # Nothing at all to show still gives a figure.
    empty = {"MD": (np.zeros(0), np.zeros(0), None)}
    _check_written(plots.ramachandran_panels(empty, tmp_path / "empty"), tmp_path / "empty")


def test_free_energy_phi(tmp_path):
    md_phi, _ = _angles(3000, (-2.0, 0.0))
    model_phi, _ = _angles(500, (-1.0, 0.0))
    weights = analysis.normalized_weights(RNG.normal(size=500))
    curves = {"MD": analysis.free_energy_1d(md_phi), "RNVP": analysis.free_energy_1d(model_phi),
              "RNVP reweighted": analysis.free_energy_1d(model_phi, weights=weights),
              "P4Inv": analysis.free_energy_1d(np.zeros(0))}
    centers, free = curves["RNVP"]
    curves["with inf"] = (centers, np.where(np.isnan(free), np.inf, free))
    stem = tmp_path / "free_energy"
    _check_written(plots.free_energy_phi(curves, stem), stem)
    with pytest.raises(InputError, match="centers"):
        plots.free_energy_phi({"bad": (np.zeros(3), np.zeros(4))}, tmp_path / "bad")


def test_training_curves(tmp_path):
    records = []
    for step in range(0, 600):
        row = {"step": step, "phase": "ml" if step < 500 else "energy", "train_nll": 300.0 * np.exp(-step / 50) - 50}
        if step % 100 == 0:
            row["test_nll"] = row["train_nll"] + 1.0
            row["p4inv_residual"] = 10.0 ** (-6 - step / 300)
        if step >= 500:
            row["energy"] = -10.0 + RNG.normal()
        records.append(row)
    records.append({"step": 600, "train_nll": None, "test_nll": "n/a", "energy": float("nan")})
    records.append({"note": "no step or numbers at all"})
    stem = tmp_path / "training"
    _check_written(plots.training_curves(records, stem), stem)
    # Only a likelihood column, or nothing at all.
    _check_written(plots.training_curves([{"train_nll": 1.0}, {"train_nll": 0.5}], tmp_path / "nll"), tmp_path / "nll")
    _check_written(plots.training_curves([], tmp_path / "blank"), tmp_path / "blank")


def test_style_does_not_leak(tmp_path):
    before = dict(matplotlib.rcParams)
    plots.free_energy_phi({"MD": analysis.free_energy_1d(RNG.uniform(-3, 3, 100))}, tmp_path / "f")
    assert dict(matplotlib.rcParams) == before
