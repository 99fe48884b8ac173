"""How the reverse ESS of a samples file depends on the number of samples it is measured on.

    python run/scripts/ess_by_count.py SAMPLES.h5 [SAMPLES.h5 ...] [--counts 20000 100000]

The published table measures its ESS on 1,000,000 samples, bgp4's rows on 20,000. For each file
(a `bgp4 sample` output, raw or refined): the plain and clipped (top 1e-4 of the log weights, by
the table's rule) reverse ESS of all samples, then of disjoint consecutive subsets of each count, as
their mean, standard deviation and range over the subsets. "quantile" is the clipped ESS by the
rule bgp4 used before commit `a69d6f3` (the log weights clamped to their 1 - 1e-4 quantile), kept here
to show what that change moves.
"""

from __future__ import annotations

import argparse

import numpy as np

from bgp4.analysis.weights import clipped_reverse_ess, reverse_ess
from bgp4.generator.sample import SAMPLE_EXTRAS
from bgp4.simulation.data import load_trajectory

__all__ = ["log_weights_of", "quantile_clipped_ess", "by_count", "main"]


def log_weights_of(path: str) -> np.ndarray:
    """Log importance weights (n,) of a samples file; samples outside the coordinate domain at -inf."""
    t = load_trajectory(path, extras=SAMPLE_EXTRAS)
    return np.where(t.extras["in_domain"].astype(bool), t.extras["log_w"], -np.inf)


def quantile_clipped_ess(log_w: np.ndarray, fraction: float = 1e-4) -> float:
    """The clipped reverse ESS by bgp4's rule before commit `a69d6f3`: every log weight above the
    (1 - fraction) quantile of the finite ones (numpy's linear quantile) lowered to it."""
    finite = log_w[np.isfinite(log_w)]
    return reverse_ess(np.minimum(log_w, np.quantile(finite, 1.0 - fraction)) if finite.size else log_w)


def by_count(log_w: np.ndarray, count: int) -> dict[str, np.ndarray]:
    """Plain, clipped and quantile-clipped reverse ESS of each disjoint consecutive subset of
    `count` samples."""
    parts = [log_w[i : i + count] for i in range(0, log_w.size - count + 1, count)]
    return {
        "plain": np.array([reverse_ess(p) for p in parts]),
        "clipped": np.array([clipped_reverse_ess(p) for p in parts]),
        "quantile": np.array([quantile_clipped_ess(p) for p in parts]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--counts", type=int, nargs="+", default=[20_000, 100_000])
    args = parser.parse_args(argv)
    for path in args.files:
        log_w = log_weights_of(path)
        whole = ", ".join(f"{kind} {values[0]:.4f}" for kind, values in by_count(log_w, log_w.size).items())
        print(f"{path}: all {log_w.size}: {whole}")
        for count in args.counts:
            if count > log_w.size:
                continue
            ess = by_count(log_w, count)
            for kind, values in ess.items():
                sd = values.std(ddof=1) if values.size > 1 else 0.0
                print(
                    f"  {count} x {values.size}: {kind} mean {values.mean():.4f} sd {sd:.4f}"
                    f" range [{values.min():.4f}, {values.max():.4f}]"
                )


if __name__ == "__main__":
    main()
