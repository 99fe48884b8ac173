"""Reverse ESS (plain, clipped as the field's table, 95 % bootstrap) of refined samples files (session 21)."""

import sys

import numpy as np

from bgp4.analysis.weights import clipped_reverse_ess, reverse_ess, reverse_ess_interval
from bgp4.generator.sample import REFINED_EXTRAS
from bgp4.simulation.data import load_trajectory

for path in sys.argv[1:]:
    t = load_trajectory(path, extras=REFINED_EXTRAS)
    log_w = np.where(t.extras["in_domain"].astype(bool), t.extras["log_w"], -np.inf)
    lo, hi = reverse_ess_interval(log_w)
    print(
        f"{path}: n {log_w.size}, K {t.settings.get('refine_levels')}, reverse ESS {reverse_ess(log_w):.4f} "
        f"[{lo:.3f}, {hi:.3f}], clipped {clipped_reverse_ess(log_w):.4f}, settings {t.settings}"
    )
