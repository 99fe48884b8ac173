"""Which flow coordinates carry a run's log-weight spread: per coordinate group, how well the raw
samples' marginals match MD (KS statistic, std ratio) and how strongly log w correlates with each
coordinate and its square, over the bulk (the lowest 5 % of log w, the clashes, left out).

    python logw_by_coordinate.py RUN DATA.h5 [--every 4]

RUN is a `bgp4 train` run directory with `samples.h5` (`bgp4 sample RUN`); DATA the MD file.
"""

from __future__ import annotations

import argparse

import mdtraj
import numpy as np
import tables
import torch
from scipy.stats import ks_2samp

from bgp4.generator.model import load_generator
from bgp4.simulation.data import load_trajectory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("data")
    parser.add_argument("--every", type=int, default=4, help="MD frames: every n-th")
    args = parser.parse_args()
    t = load_generator(f"{args.run}/model.pt").transform
    with tables.open_file(f"{args.run}/samples.h5") as f:
        log_w = f.root.log_w[:]
    xyz = mdtraj.load(f"{args.run}/samples.h5").xyz  # nm
    with torch.no_grad():
        ys = t.from_cartesian(torch.as_tensor(xyz, dtype=torch.float64))[0].numpy()
        ym = t.from_cartesian(torch.as_tensor(load_trajectory(args.data).xyz[:: args.every], dtype=torch.float64))[0]
    ym = ym.numpy()
    ok = np.isfinite(log_w)
    bulk = ok & (log_w > np.quantile(log_w[ok], 0.05))
    lw, yb = log_w[bulk], ys[bulk]
    print(f"log w over the bulk: std {lw.std():.2f} nats ({bulk.sum()} of {len(log_w)} samples)")
    nb, ni = t.n_free_bonds, t.n_ic
    kind = np.array(["bond"] * nb + ["angle"] * ni + ["torsion"] * ni + ["rigid"] * (ys.shape[1] - nb - 2 * ni))
    ks = np.array([ks_2samp(ys[ok, k], ym[:, k]).statistic for k in range(ys.shape[1])])
    ratio = ys[ok].std(0) / ym.std(0)
    c1 = np.abs([np.corrcoef(lw, yb[:, k])[0, 1] for k in range(yb.shape[1])])
    c2 = np.abs([np.corrcoef(lw, (yb[:, k] - ym[:, k].mean()) ** 2)[0, 1] for k in range(yb.shape[1])])
    for group in ("bond", "angle", "torsion", "rigid"):
        m = kind == group
        print(
            f"{group} ({m.sum()}): KS mean {ks[m].mean():.3f} max {ks[m].max():.3f}; std ratio "
            f"{ratio[m].min():.3f}-{ratio[m].max():.3f}; max |corr(log w, y)| {c1[m].max():.3f}, "
            f"max |corr(log w, y^2)| {c2[m].max():.3f}"
        )
    for k in np.argsort(-c2)[:5]:
        print(f"dim {k} ({kind[k]}): |corr(log w, y^2)| {c2[k]:.3f}, |corr(log w, y)| {c1[k]:.3f}, KS {ks[k]:.3f}")


if __name__ == "__main__":
    main()
