"""The figure functions write PNG and PDF files, show what their data say, and survive awkward data."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from bgp4.analysis import estimators as analysis
from bgp4.analysis import plots, plots_training
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


@pytest.fixture
def drawn(monkeypatch):
    """The Figure objects the figure functions save, in order (to check what they show)."""
    figures = []
    save = plots._save

    def keep(fig, path):
        figures.append(fig)
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    return figures


def _panels(fig):
    """The visible data axes of a figure (colorbars have no title)."""
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]


def _angles(n, centre):
    phi = np.angle(np.exp(1j * (centre[0] + 0.4 * RNG.standard_normal(n))))
    psi = np.angle(np.exp(1j * (centre[1] + 0.4 * RNG.standard_normal(n))))
    return phi, psi


@pytest.mark.slow
def test_energy_violins(tmp_path, drawn):
    md = RNG.normal(-20.0, 4.0, 500)
    model = RNG.normal(-17.0, 5.0, 400)
    model[:5] = [np.inf, np.nan, 1e9, -np.inf, 1e30]
    columns = {
        "MD data": md,
        "MD + 0.004 nm": md + 13.0,
        "RNVP": model,
        "P4Inv": np.zeros(0),
        "one value": np.array([-10.0]),
    }
    threshold = md.max()
    fractions = {k: analysis.low_energy_fraction(v, threshold) for k, v in columns.items()}
    stem = tmp_path / "energies"
    paths = plots.energy_violins(columns, fractions, stem, threshold=threshold)
    _check_written(paths, stem)
    (ax,) = drawn[0].axes
    # each column's annotation shows its low-energy fraction, in column order
    notes = [t.get_text() for t in ax.texts]
    assert notes[0].startswith(f"low-E {fractions['MD data']:.2%}") and "no samples" in notes[3]
    assert "off-scale" in notes[2]  # the model's inf, nan and 1e9 / 1e30 values
    # the median marks sit at each column's median (violins are drawn only where there is a density)
    medians = [c for c in ax.collections if type(c).__name__ == "LineCollection"]
    assert [float(m.get_segments()[0][0, 1]) for m in medians[:2]] == pytest.approx(
        [np.median(md), np.median(md + 13.0)], abs=1e-9
    )
    # An explicit clip and a ".png" path work too.
    paths = plots.energy_violins(columns, fractions, tmp_path / "clipped.png", clip=(-40.0, 10.0))
    _check_written(paths, tmp_path / "clipped")
    with pytest.raises(InputError):
        plots.energy_violins({}, {}, tmp_path / "none")
    with pytest.raises(InputError, match="low < high"):
        plots.energy_violins(columns, fractions, tmp_path / "bad", clip=(1.0, 1.0))


@pytest.mark.slow
def test_ramachandran_panels(tmp_path, drawn):
    md = _angles(2000, (-2.0, 2.5))
    model = _angles(1000, (-1.5, -0.5))
    weights = analysis.normalized_weights(RNG.normal(0.0, 3.0, 1000))
    panels = {
        "MD": (*md, None),
        "RNVP": (*model, None),
        "RNVP reweighted": (*model, weights),
        "P4Inv (empty)": (np.zeros(0), np.zeros(0), None),
        "NaN angles": (np.full(5, np.nan), np.full(5, np.nan), None),
    }
    stem = tmp_path / "sub" / "rama"
    _check_written(plots.ramachandran_panels(panels, stem, bins=32), stem)
    axes = _panels(drawn[0])
    assert len(axes) == len(panels) and all(ax.get_title().startswith(label) for ax, label in zip(axes, panels))
    # five panels on a balanced grid: 3 + 2, not 4 + 1
    rows = sorted({round(ax.get_position().y0, 3) for ax in axes}, reverse=True)
    assert [sum(round(ax.get_position().y0, 3) == y for ax in axes) for y in rows] == [3, 2]
    # orientation: phi along x, psi along y; the MD basin at (-2.0, 2.5) and the model's at
    # (-1.5, -0.5) are where their densities peak
    for ax, (phi0, psi0) in zip(axes, [(-2.0, 2.5), (-1.5, -0.5)]):
        mesh = ax.collections[0]
        density = mesh.get_array().reshape(32, 32)  # rows: psi, columns: phi
        corners = mesh.get_coordinates()  # (33, 33, 2) x (phi), y (psi) of the bin corners
        row, col = np.unravel_index(np.argmax(density), density.shape)
        assert corners[row, col, 0] <= phi0 + 0.4 and corners[row, col + 1, 0] >= phi0 - 0.4
        assert corners[row, col, 1] <= psi0 + 0.4 and corners[row + 1, col, 1] >= psi0 - 0.4
    # Nothing at all to show still gives a figure.
    empty = {"MD": (np.zeros(0), np.zeros(0), None)}
    _check_written(plots.ramachandran_panels(empty, tmp_path / "empty"), tmp_path / "empty")


def test_long_run_names_wrap_in_panel_titles():
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    label = "ALA2: ala4-300K-fab-scratch-s0-more +AIS(20)"
    density = np.ones((8, 8))
    plots._density_panel(ax, density, plots._density_norm([density]), label, 10_000)
    lines = ax.get_title().splitlines()
    assert lines[-1] == "(n = 10,000)" and len(lines) >= 3  # the name on two lines or more
    assert all(len(line) <= plots.TITLE_CHARS for line in lines) and "".join(lines[:-1]).replace(
        " ", ""
    ) == label.replace(" ", "")


def test_free_energy_phi(tmp_path, drawn):
    md_phi, _ = _angles(3000, (-2.0, 0.0))
    model_phi, _ = _angles(500, (-1.0, 0.0))
    weights = analysis.normalized_weights(RNG.normal(size=500))
    curves = {
        "MD": analysis.free_energy_1d(md_phi),
        "RNVP": analysis.free_energy_1d(model_phi),
        "RNVP reweighted": analysis.free_energy_1d(model_phi, weights=weights),
        "P4Inv": analysis.free_energy_1d(np.zeros(0)),
    }
    centers, free = curves["RNVP"]
    curves["with inf"] = (centers, np.where(np.isnan(free), np.inf, free))
    stem = tmp_path / "free_energy"
    _check_written(plots.free_energy_phi(curves, stem), stem)
    (ax,) = drawn[0].axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines) == list(curves)
    x, y = lines["MD"].get_data()
    assert abs(x[np.nanargmin(y)] - (-2.0)) < 0.3  # the minimum of F sits in the basin
    assert lines["RNVP reweighted"].get_linestyle() == "--"
    assert lines["RNVP reweighted"].get_color() == lines["RNVP"].get_color()
    with pytest.raises(InputError, match="centers"):
        plots.free_energy_phi({"bad": (np.zeros(3), np.zeros(4))}, tmp_path / "bad")


@pytest.mark.slow
def test_training_curves(tmp_path, drawn):
    records = []
    for step in range(0, 600):
        row = {"step": step, "phase": "ml" if step < 500 else "energy", "train_nll": 300.0 * np.exp(-step / 50) - 50}
        if step % 100 == 0:
            row["test_nll"] = row["train_nll"] + 1.0
            row["p4inv_residual"] = 10.0 ** (-6 - step / 300)
        if step >= 500:
            median = -3.0 + 0.1 * RNG.normal()
            row.update(
                energy=median + 2.0, energy_median_kT=median, energy_q10_kT=median - 2.0, energy_q90_kT=median + 5.0
            )
        records.append(row)
    records[550]["energy"] = 1e5  # one batch with a wild sample: its mean explodes, its median does not
    records.append({"step": 600, "train_nll": None, "test_nll": "n/a", "energy": float("nan")})
    records.append({"note": "no step or numbers at all"})
    stem = tmp_path / "training"
    _check_written(plots_training.training_curves(records, stem), stem)
    nll_ax, energy_ax, residual_ax = [ax for ax in drawn[0].axes if ax.get_visible()]
    assert energy_ax.get_yscale() == "symlog" and residual_ax.get_yscale() == "log"
    medians = [r["energy_median_kT"] for r in records if "energy_median_kT" in r]
    plotted = energy_ax.get_lines()[0].get_ydata()  # the raw series, under its running mean
    assert np.allclose(plotted, medians)
    low, high = energy_ax.get_ylim()
    assert low < -5.0 and high < 100.0  # the 1e5 kT mean does not set the scale
    # records with the mean only (older runs) still give an energy panel
    drawn.clear()
    plots_training.training_curves([{"step": s, "energy": float(s)} for s in range(5)], tmp_path / "mean")
    assert [line.get_label() for line in drawn[0].axes[1].get_lines()][-1] == "mean sample energy"
    # Only a likelihood column, or nothing at all.
    nll = plots_training.training_curves([{"train_nll": 1.0}, {"train_nll": 0.5}], tmp_path / "nll")
    _check_written(nll, tmp_path / "nll")
    _check_written(plots_training.training_curves([], tmp_path / "blank"), tmp_path / "blank")


def _mixed_records() -> list[dict]:
    """Metrics-log rows of a mixed run as `finish_training` maps them: likelihood phase, then the
    energy phase with the reverse-KL quantities mixed logs too (batch ESS, out of domain, KL)."""
    records = []
    for step in range(0, 1200, 100):
        row = {"global_step": step, "phase": "ml" if step < 800 else "energy", "train_nll": -100.0 - step / 100}
        row.update(test_nll=row["train_nll"] + 1.0, energy_evaluations=max(0, step - 800) * 256, md_frames=step * 256)
        row["p4inv_last_residual"] = 10.0 ** (-6 - step / 600)
        if step >= 800:
            median = -3.0 + 0.1 * RNG.normal()
            row.update(energy_kT=median + 2.0, energy_median_kT=median, energy_q10_kT=median - 2.0)
            row.update(energy_q90_kT=median + 5.0, reverse_kl=150.0 - step / 100, batch_ess=0.3, out_of_domain=0.01)
        records.append(row)
    return records


def _fab_records() -> list[dict]:
    """Metrics-log rows of FAB after a likelihood run (`--init`), as the run logs them."""
    records = [{"global_step": 0, "phase": "ml", "step": 0, "test_nll": -146.8, "energy_evaluations": 0}]
    for step in range(100, 500, 100):
        row = {"global_step": step, "phase": "energy", "step": step, "ais_acceptance": 0.65, "ais_ess": 0.15}
        row.update(buffer_nll=-146.5 - step / 1000, buffer_size=64.0 * step, fab_loss=-129.0 - step / 100)
        row.update(flow_ess=0.35 + step / 4000, log_weight_adjust=-0.16, test_nll=-146.8)
        row["energy_evaluations"] = 1300 * step
        records.append(row)
    return records


def _finish(tmp_path, objective, records):
    """Draw `records` through `finish_training`'s mapping, for a run of `objective`."""
    from types import SimpleNamespace

    from bgp4.generator.train import finish_training

    run = SimpleNamespace(records=lambda: records, file=lambda name: tmp_path / name, finish=lambda summary: None)
    finish_training(SimpleNamespace(run=run, s=SimpleNamespace(objective=objective)), {})
    _check_written([tmp_path / "training.png", tmp_path / "training.pdf"], tmp_path / "training")


def _labels(ax):
    """The legend labels of an axes' lines (the energy-phase marker has none)."""
    return [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]


def _layout(fig):
    """(y label, x label, y scale) of every visible panel, in order (twin axes included)."""
    return [(ax.get_ylabel(), ax.get_xlabel(), ax.get_yscale()) for ax in fig.axes if ax.get_visible()]


@pytest.mark.slow
def test_training_curves_of_a_mixed_run_keep_their_panels(tmp_path, drawn):
    """The objectives without sampling panels (ml, mixed) draw the three panels they always had,
    in one row, although mixed logs a batch ESS, a KL and energy evaluations too."""
    before = [
        ("negative log-likelihood", "optimizer step", "linear"),
        ("sample energy [$k_BT$]", "optimizer step", "symlog"),
        ("P4Inv inverse residual", "optimizer step", "log"),
    ]
    for objective in ("mixed", "ml"):
        drawn.clear()
        _finish(tmp_path / objective, objective, _mixed_records())
        assert _layout(drawn[0]) == before
        assert len({round(ax.get_position().y0, 3) for ax in drawn[0].axes}) == 1  # one row
        assert all(ax.get_shared_x_axes().joined(drawn[0].axes[0], ax) for ax in drawn[0].axes)


@pytest.mark.slow
def test_training_curves_of_a_fab_run_show_ess_against_evaluations(tmp_path, drawn):
    records = _fab_records()
    _finish(tmp_path, "fab", records)
    layout = _layout(drawn[0])
    assert [y for y, _, _ in layout] == [
        "negative log-likelihood",
        "reverse ESS / share",
        "reverse ESS",
        "energy-phase loss [nats]",
        "replay buffer [samples]",
        "mean log weight adjustment",
    ]  # no sample energy: FAB logs none, so there is no empty energy panel
    assert [x for _, x, _ in layout[:5]] == ["optimizer step"] * 2 + ["target energy evaluations"] + [
        "optimizer step"
    ] * 2
    nll_ax, ess_ax, evaluations_ax, loss_ax, _, _ = [ax for ax in drawn[0].axes if ax.get_visible()]
    lines = {line.get_label(): line for line in ess_ax.get_lines()}
    energy_phase = records[1:]
    assert np.allclose(lines["ESS, flow samples"].get_ydata(), [r["flow_ess"] for r in energy_phase])
    assert np.allclose(lines["ESS, AIS batch"].get_xdata(), [r["global_step"] for r in energy_phase])
    assert "AIS acceptance" in lines and "out of domain" not in lines
    # ESS against the cumulative energy evaluations: the x of each point is the evaluations so far
    flow = {line.get_label(): line for line in evaluations_ax.get_lines()}["ESS, flow samples"]
    assert np.allclose(flow.get_xdata(), [r["energy_evaluations"] for r in energy_phase])
    assert not evaluations_ax.get_shared_x_axes().joined(evaluations_ax, ess_ax)
    assert ess_ax.get_shared_x_axes().joined(nll_ax, ess_ax) and loss_ax.get_shared_x_axes().joined(nll_ax, loss_ax)
    assert _labels(nll_ax) == ["replay buffer (FAB)", "test"]
    assert _labels(loss_ax) == ["FAB loss"]


@pytest.mark.slow
def test_training_curves_of_a_kl_run_without_data(tmp_path, drawn):
    """kl from scratch: its batch ESS is the flow's ESS; no likelihood at all, so no empty panel."""
    records = [{"global_step": 0, "phase": "ml", "step": 0, "test_nll": None, "energy_evaluations": 0}]
    for step in (10, 20, 30):
        row = {"global_step": step, "phase": "energy", "step": step, "batch_ess": 0.1, "out_of_domain": 0.0}
        row.update(energy_kT=30.0, energy_median_kT=-1.4, energy_q10_kT=-7.7, energy_q90_kT=7.2)
        row.update(reverse_kl=149.0, test_nll=None, energy_evaluations=256 * step)
        records.append(row)
    _finish(tmp_path, "kl", records)
    assert [y for y, _, _ in _layout(drawn[0])] == [
        "sample energy [$k_BT$]",
        "reverse ESS / share",
        "reverse ESS",
        "energy-phase loss [nats]",
    ]
    ess_ax, loss_ax = [ax for ax in drawn[0].axes if ax.get_visible()][1::2]
    assert _labels(ess_ax) == ["ESS, flow samples", "out of domain"]
    assert _labels(loss_ax) == ["reverse KL (up to log Z)"]


def test_style_does_not_leak(tmp_path):
    before = dict(matplotlib.rcParams)
    plots.free_energy_phi({"MD": analysis.free_energy_1d(RNG.uniform(-3, 3, 100))}, tmp_path / "f")
    assert dict(matplotlib.rcParams) == before


def test_seed_panels_show_each_seed_and_the_mean_of_each_metric(tmp_path, drawn):
    def entry(values, mean, low, high):
        return {"values": dict(enumerate(values)), "mean": mean, "low": low, "high": high, "n": len(values)}

    summary = {
        "reverse_ess": {"label": "reverse ESS", "models": {"a": entry([0.4, 0.5, 0.6], 0.5, 0.25, 0.75),
                                                            "b": entry([0.7, None], 0.7, None, None)}},
        "test_nll": {"label": "test NLL", "models": {"a": entry([], None, None, None),
                                                      "b": entry([], None, None, None)}},  # no seed: no panel
    }  # fmt: skip
    _check_written(plots.seed_panels(["a", "b"], summary, tmp_path / "seeds"), tmp_path / "seeds")
    (ax,) = _panels(drawn[0])
    assert ax.get_title() == "reverse ESS"
    dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert [list(d.get_ydata()) for d in dots] == [[0.4, 0.5, 0.6], [0.7]]  # a missing seed is left out
