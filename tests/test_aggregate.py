"""What a sweep's aggregate collects from one run's metrics (bgp4.report.aggregate)."""

from __future__ import annotations

import math
from concurrent.futures import Future

import pytest

from bgp4.report.aggregate import RESIDUE_KEYS, _draw, _label, _numeric_metrics


def test_every_residue_but_the_flat_pair_is_aggregated():
    residue = {"dF_phi_kT": 2.5, "dF_phi_reweighted_kT": 2.6, "ramachandran_tv": 0.05, "p_phi_positive_error": 0.01}
    summary = {
        "reverse_ess": 0.5,
        "dF_phi_kT": 2.0,
        "dF_phi_error_kT": 0.1,
        "weights_note": None,
        "residues": {"ALA2": residue, "ALA3": {"dF_phi_kT": 2.0}},
    }
    values = _numeric_metrics(summary, {"wall_s": 120.0}, pair="ALA3")
    assert values["dF_phi_kT [ALA2]"] == 2.5 and values["ramachandran_tv [ALA2]"] == 0.05
    assert values["ramachandran_tv_reweighted [ALA2]"] is None  # a residue key the run lacks counts as missing
    assert not any(k.endswith("[ALA3]") for k in values)  # the flat keys hold the pair's residue
    assert {k for k in values if "[" in k} == {f"{k} [ALA2]" for k in RESIDUE_KEYS}
    assert "dF_phi_error_kT" not in values and "residues" not in values
    assert values["log10_reverse_ess"] == pytest.approx(math.log10(0.5)) and values["train_wall_min"] == 2.0
    assert _label("dF_phi_reweighted_kT [ALA2]") == "dF(phi > 0), reweighted (kT), ALA2"
    assert _label("reverse_ess") == "reverse ESS" and _label("unknown_key") == "unknown_key"


def test_figures_the_workers_fail_to_draw_are_drawn_here_and_the_user_is_told(capsys):
    class FailingExecutor:  # the first job fails (a worker that cannot see the directory); the second stays queued
        def __init__(self):
            self.futures = []

        def submit(self, function, *args):
            future = Future()
            if not self.futures:
                future.set_exception(OSError("no such directory: /sweep/report"))
            self.futures.append(future)
            return future

    executor = FailingExecutor()
    drawn = _draw({"seeds": (lambda v: [v], "a.png"), "energies": (lambda v: [v], "b.png")}, executor)
    assert drawn == {"seeds": ["a.png"], "energies": ["b.png"]}
    assert "OSError: no such directory: /sweep/report" in capsys.readouterr().err
    assert executor.futures[1].cancelled()  # it cannot write beside the local drawing
