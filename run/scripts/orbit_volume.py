"""How much the rigid block's rotation-orbit volume varies over MD frames, and what leaving it out of
log q did to the importance weights.

    python run/scripts/orbit_volume.py DATA.h5 [DATA.h5 ...] [--no-fix-constrained] [--frames 20000]
    python run/scripts/orbit_volume.py --run RUN [--run RUN ...]

For each data file: a transform fitted as `bgp4 train` fits it (automatic or hand z-matrix as the
file's molecule has it; every constrained bond fixed unless `--no-fix-constrained`), the orbit term
`orbit_log_volume` of each frame's superposed block (nats, relative to the reference), its spread,
the Kish ESS of the factor e^-o alone over the frames, and per residue the shift it makes in a
reweighted dF(phi > 0): ln<e^-o>_{phi<0} - ln<e^-o>_{phi>0} over the MD frames (kT). Before the orbit
term was part of log q (session 39), log q was too high by o, so every weight carried the factor
e^-o of its sample: a reweighted dF was off by that shift and the reverse ESS lost about 1 - the
factor's ESS.

With `--run`: RUN/samples.h5 (raw samples) reweighted both ways, with the orbit term of each sample
under the run's own transform: reverse ESS (plain and clipped) without it and with it. A file drawn
before the change records no `log_q`; its log_w is the old one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from scipy.special import logsumexp

from bgp4.analysis.residues import residue_dihedrals
from bgp4.analysis.weights import clipped_reverse_ess, reverse_ess
from bgp4.flows.coordinates import MixedCoordinateTransform
from bgp4.generator.model import load_generator
from bgp4.simulation.data import load_trajectory

__all__ = ["main", "residue_shifts"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, nargs="*")
    parser.add_argument("--run", type=Path, action="append", default=[], help="a training run with samples.h5")
    parser.add_argument("--no-fix-constrained", dest="fix", action="store_false")
    parser.add_argument("--frames", type=int, default=20000, help="frames used, evenly spaced")
    a = parser.parse_args()
    for run in a.run:
        _samples_both_ways(run)
    for path in a.data:
        data = load_trajectory(path)
        molecule = data.molecule()
        xyz = data.xyz[:: max(1, data.n_frames // a.frames)]
        fix = a.fix and molecule.system.getNumConstraints() > 0
        t = MixedCoordinateTransform.fit(torch.as_tensor(xyz, dtype=torch.float64), molecule, fix_constrained=fix)
        with torch.no_grad():
            o = t.orbit_term(xyz).numpy()
        print(
            f"{path.name}: {molecule.name}, {len(xyz)} frames, {t.n_dims} flow dims, rigid block {t.rigid_block}; "
            f"orbit term std {o.std():.4f} nats, range [{o.min():+.3f}, {o.max():+.3f}]; "
            f"Kish ESS of e^-o {reverse_ess(-o):.5f}"
        )
        phi, _ = residue_dihedrals(xyz, molecule)
        for k, shift in enumerate(residue_shifts(o, phi)):
            if np.isfinite(shift):
                pos = phi[:, k] > 0
                print(f"  residue {k + 1}: P(phi > 0) {pos.mean():.4f}; reweighted dF(phi > 0) shift {shift:+.4f} kT")


def _samples_both_ways(run: Path) -> None:
    t = load_generator(run / "model.pt").transform
    samples = load_trajectory(run / "samples.h5", extras=("log_w",))
    x = torch.as_tensor(samples.xyz, dtype=torch.float64)
    with torch.no_grad():
        o = t.orbit_term(x).numpy()
    log_w = samples.extras["log_w"]
    new = log_w if "log_q" in samples.settings else log_w + o  # log q drops by o: log w rises by o
    old = new - o
    print(
        f"{run}: {len(o)} samples, orbit term std {o.std():.4f}; reverse ESS without it {reverse_ess(old):.4f} "
        f"(clipped {clipped_reverse_ess(old):.4f}), with it {reverse_ess(new):.4f} "
        f"(clipped {clipped_reverse_ess(new):.4f})"
    )


def residue_shifts(o: np.ndarray, phi: np.ndarray) -> list[float]:
    """Per residue, the shift (kT) that the factor e^-o of the orbit term `o` (n,) made in a
    reweighted dF(phi > 0): ln<e^-o>_{phi<0} - ln<e^-o>_{phi>0} over frames with torsions `phi`
    (n, residues) rad; nan for a residue with no frame on one side."""
    shifts = []
    for pos in (phi > 0).T:
        both = pos.any() and (~pos).any()
        shifts.append(_log_mean_exp(-o[~pos]) - _log_mean_exp(-o[pos]) if both else float("nan"))
    return shifts


def _log_mean_exp(values: np.ndarray) -> float:
    return float(logsumexp(values) - np.log(values.size))


if __name__ == "__main__":
    main()
