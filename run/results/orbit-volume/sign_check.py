"""Regress u(x) + log q(x) over MD frames on the rigid block's orbit term o(x).

    python run/results/orbit-volume/sign_check.py RUN DATA.h5

A flow that learned the data's density in its own coordinates gives slope 0 with today's log q
and slope 1 with the log q of bgp4 before 2026-12-05 (which lacked o), provided its own errors do
not follow the block's shape. The naive standard error ignores the frames' correlation.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from bgp4.generator.model import load_generator
from bgp4.simulation.data import load_trajectory

__all__ = ["main"]


def main() -> None:
    torch.set_num_threads(1)
    bg = load_generator(sys.argv[1] + "/model.pt").eval()
    data = load_trajectory(sys.argv[2])
    every = max(1, data.n_frames // 20000)
    x = torch.as_tensor(data.xyz[::every], dtype=torch.float64)
    u = data.energies[::every] / data.molecule().kT(data.settings["temperature"])
    with torch.no_grad():
        log_q = torch.cat([bg.log_prob(c.to(bg.dtype)) for c in x.split(2000)]).double().numpy()
        o = bg.transform.orbit_term(x).numpy()
    ok = np.isfinite(log_q)
    design = np.vstack([o[ok], np.ones(ok.sum())]).T
    for name, y in (("today's log q", u + log_q), ("old log q (today's + o)", u + log_q + o)):
        coef, *_ = np.linalg.lstsq(design, y[ok], rcond=None)
        resid = y[ok] - design @ coef
        se = resid.std() / (o[ok].std() * np.sqrt(ok.sum()))
        print(f"{name}: slope of u + log q on o {coef[0]:+.3f} +- {se:.3f}; residual std {resid.std():.3f}")


if __name__ == "__main__":
    main()
