"""Two or more umbrella walks of run/scripts/umbrella_phi.py (their --json files) side by side:
each walk's P(phi > 0) with MBAR's standard error, how far the walks lie apart in their combined
errors, their mean with the standard error of the spread, and the replica exchange's z against it.

    python umbrella_walks.py umbrella-k400-ps1000-s18.json umbrella-k400-ps1000-s19.json
"""

from __future__ import annotations

import json
import sys

import numpy as np


def main(paths: list[str]) -> None:
    walks = [json.load(open(p)) for p in paths]
    p = np.array([w["umbrella"]["p_phi_positive"] for w in walks])
    se = np.array([w["umbrella"]["se"] for w in walks])
    for path, w, pi, si in zip(paths, walks, p, se):
        print(f"{path}: seed {w['settings']['seed']}, {w['umbrella_ns']:.1f} ns, P(phi > 0) {pi:.4f} +- {si:.4f}")
    if len(p) == 2:
        print(f"walks apart: {(p[0] - p[1]) / np.hypot(*se):+.2f} combined MBAR errors")
    mean, se_mbar = p.mean(), np.sqrt((se**2).sum()) / len(p)
    se_spread = p.std(ddof=1) / np.sqrt(len(p))
    print(f"mean of {len(p)} walks {mean:.4f}; its SE from MBAR's errors {se_mbar:.4f}, their spread {se_spread:.4f}")
    data = walks[0]["data"]
    se_mean = max(se_mbar, se_spread)
    z = (data["p_phi_positive"] - mean) / np.hypot(data["se"], se_mean)
    rex = f"replica exchange {data['p_phi_positive']:.4f} +- {data['se']:.4f}"
    print(f"{rex}: z = {z:+.2f} against the mean (with the larger of its two SEs)")


if __name__ == "__main__":
    main(sys.argv[1:])
