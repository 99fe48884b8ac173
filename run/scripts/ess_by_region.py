"""Where a run's importance weights lose their ESS: between the phi > 0 and phi < 0 regions, or within them.

    python run/scripts/ess_by_region.py RUN [RUN ...]

For each run's `samples.h5`: reverse ESS (Kish, per sample) of all samples, within phi < 0 and
within phi > 0; the share of samples and of weight with phi > 0; the ESS the region mismatch
alone would leave (every weight replaced by its region's mean weight); and the ESS with the
phi > 0 region's mean weight set equal to the other's (the population error removed).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from bgp4.analysis import estimators as analysis
from bgp4.analysis.weights import reverse_ess
from bgp4.simulation.data import load_trajectory

__all__ = ["kish", "main"]


def kish(w: np.ndarray) -> float:
    """Kish ESS per sample of linear weights (zeros allowed), through the package's one Kish ESS."""
    with np.errstate(divide="ignore"):
        return float(reverse_ess(np.log(w))) if w.size and w.sum() > 0 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+")
    for run in parser.parse_args().runs:
        samples = load_trajectory(run / "samples.h5", extras=("log_w",))
        phi, _ = analysis.backbone_dihedrals(samples.xyz, samples.molecule())
        log_w = samples.extras["log_w"]
        ok = np.isfinite(log_w)
        w = np.where(ok, np.exp(log_w - log_w[ok].max()), 0.0)
        pos = phi > 0
        by_region = np.where(pos, w[pos].mean(), w[~pos].mean())
        corrected = np.where(pos, w * w[~pos].mean() / w[pos].mean(), w)
        print(
            f"{run}: ESS {kish(w):.3f}; within phi<0 {kish(w[~pos]):.3f}, within phi>0 {kish(w[pos]):.3f}; "
            f"phi>0 share of samples {pos.mean():.4f}, of weight {w[pos].sum() / w.sum():.4f}; "
            f"ESS from the region mismatch alone {kish(by_region):.3f}; with it removed {kish(corrected):.3f}"
        )


if __name__ == "__main__":
    main()
