"""Mean NLL of a trained run's flow on each of several MD files (every K-th frame): runs it learned
from against one it never saw. With frames 0.1 ps apart, bgp4's random train/test split puts each
test frame beside training frames of the same trajectory; a held-out MD run is the test of whether
more MD would lower the NLL. Frames the flow gives no density (NLL over its median + 50 nats: states
absent from its training frames) are counted and left out of a second mean.

    python nll_by_run.py RUN DATA.h5 [...] [--every 5]     # RUN holds model.pt
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from bgp4.generator.model import load_generator
from bgp4.generator.rows import by_rows
from bgp4.simulation.data import load_trajectory


def block_mean(values: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error over 20 blocks of consecutive frames (time-correlated frames: an
    i.i.d. error would be too small)."""
    blocks = np.array([b.mean() for b in np.array_split(values, 20)])
    return float(values.mean()), float(blocks.std(ddof=1) / np.sqrt(blocks.size))


def frame_nll(bg, xyz: np.ndarray) -> np.ndarray:
    """-log q (nats) of each frame (n, n_atoms, 3) nm, in slices of rows (bgp4's `by_rows`)."""
    with torch.no_grad():
        return by_rows(bg.nll, torch.as_tensor(xyz)).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("data", nargs="+")
    parser.add_argument("--every", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    bg = load_generator(f"{args.run}/model.pt")
    print(f"{args.run}: mean NLL (nats) on every {args.every}th frame, +- SE over 20 blocks")
    for path in args.data:
        xyz = load_trajectory(path).xyz[:: args.every].astype(np.float64)
        nll = frame_nll(bg, xyz)
        none = nll > np.median(nll) + 50.0
        (mean, se), (kept, kept_se) = block_mean(nll), block_mean(nll[~none])
        print(
            f"  {path}: {len(xyz)} frames, {mean:.3f} +- {se:.3f}; {none.sum()} with no density, "
            f"without them {kept:.3f} +- {kept_se:.3f}; median {np.median(nll):.3f}"
        )


if __name__ == "__main__":
    main()
