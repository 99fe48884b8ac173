"""Where the log weights of a run's raw samples vary: the share of their variance (log w clipped to
median +- 5 nats, so that a few clashes do not swamp it) that each flow coordinate's 20 quantile
bins explain alone, and the weight share of each tenth of the latent radius |z|^2.

    python logw_by_coordinate.py RUN     # RUN holds model.pt and samples.h5 (bgp4 sample)
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from bgp4.analysis.weights import reverse_ess
from bgp4.generator.model import load_generator
from bgp4.generator.sample import SAMPLE_EXTRAS
from bgp4.simulation.data import load_trajectory


def binned_share(values: np.ndarray, target: np.ndarray, bins: int = 20) -> float:
    """Share of var(target) explained by the mean of target in quantile bins of values."""
    which = np.digitize(values, np.quantile(values, np.linspace(0, 1, bins + 1)[1:-1]))
    means = np.array([target[which == b].mean() for b in range(bins)])
    counts = np.bincount(which, minlength=bins)
    return float((counts * (means - target.mean()) ** 2).sum() / counts.sum() / target.var())


def main(run: str) -> None:
    torch.set_num_threads(1)
    t = load_trajectory(f"{run}/samples.h5", extras=SAMPLE_EXTRAS)
    log_w = np.where(t.extras["in_domain"].astype(bool), t.extras["log_w"], -np.inf)
    bg = load_generator(f"{run}/model.pt")
    with torch.no_grad():
        y, _ = bg.flow_coordinates(torch.as_tensor(t.xyz))
        z, _ = bg.flow.inverse(y)
    y, z = y.numpy(), z.numpy()
    med = np.median(log_w[np.isfinite(log_w)])
    clipped = np.clip(np.nan_to_num(log_w, neginf=med - 5), med - 5, med + 5)
    print(f"{run}: {log_w.size} samples, reverse ESS {reverse_ess(log_w):.3f}, var(clipped log w) {clipped.var():.3f}")
    shares = np.array([binned_share(y[:, i], clipped) for i in range(y.shape[1])])
    top = np.argsort(-shares)[:8]
    print("share of var(log w) by one flow coordinate, top 8:", ", ".join(f"y{i} {shares[i]:.3f}" for i in top))
    print(f"sum over all {shares.size} coordinates: {shares.sum():.3f}")
    r2 = (z**2).sum(axis=1)
    w = np.exp(log_w - log_w.max())
    edges = np.quantile(r2, np.linspace(0, 1, 11))
    which = np.clip(np.digitize(r2, edges[1:-1]), 0, 9)
    print("weight share by tenth of |z|^2:", ", ".join(f"{w[which == b].sum() / w.sum():.3f}" for b in range(10)))


if __name__ == "__main__":
    main(sys.argv[1])
