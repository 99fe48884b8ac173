"""Ramachandran TV between whole files: MD runs against each other, or samples against MD.

    python run/scripts/ramachandran_tv.py REF.h5 OTHER.h5 [OTHER2.h5 ...] [--floor N ...] [--weighted]
        [--subsample N --repeats K]

Each OTHER (a `bgp4 simulate` data file or a `bgp4 sample` samples file of the same molecule) is
scored against REF on the 64 x 64 (phi, psi) grid of `bgp4 analyze` (`ramachandran_tv`, the
molecule's own backbone pair, rad). `--weighted` also scores samples files reweighted by their
importance weights. `--floor N` prints REF's sampling floor at N frames (`ramachandran_floor`: a
random N-frame subsample of REF against its other frames, which ignores time correlation; two
independent MD runs scored against each other include it). `--subsample N` also scores K random
N-frame subsamples of each OTHER (no replacement, seeded): against REF, that is the floor of an
independent sampler of OTHER's distribution, the one a generator of N samples is held to (the
subsamples are unweighted; an OTHER with fewer than N frames is said to be too small).
Why: at 20,000 samples no TV can fall below about 0.08, so the field's published 1e-2 needs
sample counts of MD's size to be judged (run/results/benchmark-300K/dense-data.md,
"The dense data made again, and the TV target at MD-sized sample counts").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from bgp4.analysis.estimators import backbone_dihedrals, ramachandran_floor, ramachandran_tv
from bgp4.analysis.weights import normalized_weights
from bgp4.simulation.data import load_trajectory
from bgp4.simulation.molecule import check_same_molecule

__all__ = ["angles", "subsample_tvs", "main"]


def angles(path: Path, weighted: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, object]:
    """phi, psi (rad) of every frame, normalized importance weights (samples files, `weighted`)
    or None, and the file's molecule."""
    data = load_trajectory(path, extras=("log_w", "in_domain") if weighted else ())
    molecule = data.molecule()
    phi, psi = backbone_dihedrals(data.xyz, molecule)
    weights = None
    if weighted and "log_w" in data.extras:
        log_w = np.where(data.extras["in_domain"].astype(bool), data.extras["log_w"], -np.inf)
        weights = normalized_weights(log_w)
    return phi, psi, weights, molecule


def subsample_tvs(phi, psi, o_phi, o_psi, n: int, repeats: int, seed: int = 0) -> np.ndarray:
    """TV against (phi, psi) of `repeats` random n-frame subsamples of (o_phi, o_psi), no replacement."""
    rng = np.random.default_rng(seed)
    picks = [rng.choice(o_phi.size, n, replace=False) for _ in range(repeats)]
    return np.array([ramachandran_tv(phi, psi, o_phi[i], o_psi[i]) for i in picks])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ref", type=Path, help="the reference file (MD)")
    parser.add_argument("others", type=Path, nargs="*", help="files scored against it")
    parser.add_argument("--floor", type=int, nargs="*", default=[], help="sample counts of REF's floor")
    parser.add_argument("--weighted", action="store_true", help="also reweight samples files")
    parser.add_argument("--subsample", type=int, default=0, help="also score random subsamples of this size")
    parser.add_argument("--repeats", type=int, default=5, help="subsamples of each OTHER (default 5)")
    args = parser.parse_args(argv)
    if args.subsample < 0 or args.repeats < 1:
        parser.error("--subsample must be >= 0 and --repeats >= 1")
    phi, psi, _, molecule = angles(args.ref)
    print(f"{args.ref} ({phi.size} frames): P(phi > 0) {np.mean(phi > 0):.4f}; 64 x 64 bins")
    for n in args.floor:
        print(f"  floor at {n}: TV {ramachandran_floor(phi, psi, n)[1]:.4f}")
    for other in args.others:
        o_phi, o_psi, weights, o_molecule = angles(other, args.weighted)
        check_same_molecule(molecule, o_molecule, f"{args.ref} and {other}")
        line = f"  {other} ({o_phi.size}): TV {ramachandran_tv(phi, psi, o_phi, o_psi):.4f}"
        if weights is not None:
            line += f", reweighted {ramachandran_tv(phi, psi, o_phi, o_psi, weights=weights):.4f}"
        print(line + f"; P(phi > 0) {np.mean(o_phi > 0):.4f}")
        if args.subsample > o_phi.size:
            print(f"    no subsamples: {o_phi.size} frames, fewer than {args.subsample}")
        elif args.subsample > 0:
            tvs = subsample_tvs(phi, psi, o_phi, o_psi, args.subsample, args.repeats)
            tv_list = ", ".join(f"{tv:.4f}" for tv in tvs)
            print(f"    {args.repeats} random subsamples of {args.subsample}: TV {tv_list}; mean {tvs.mean():.4f}")


if __name__ == "__main__":
    main()
