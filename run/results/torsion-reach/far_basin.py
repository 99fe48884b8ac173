"""A/B test of the torsion widening where a rare basin lies beyond the splines' domain.

    python far_basin.py DATA.h5 OUT.json [--steps 2000] [--samples 20000] [--every 5]

`bgp4 train` fits its transform to the run's training frames, and on the 9.4 ns file that fit put
ALA4's phi > 0 basin at +4.6 standard units. A fit to every 5th frame of the file puts it at -5.5,
beyond the splines' +-5. This script takes that fit, once plain (std) and once widened
(`TORSION_REACH`), and trains both the same way: the spline kind's default flow, seed 0, 90 % of
the frames (a seeded random split), batches of 512, Adam at 1e-3 with a cosine decay, gradients
clipped at 10, as `bgp4 train --model spline --augment` does but without the relabelling. Then it draws
`--samples` raw samples from each and writes, per arm, the raw reverse ESS and each residue's
P(phi > 0) beside MD's, to OUT.json.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from unittest import mock

import mdtraj
import numpy as np
import torch

from bgp4.analysis.estimators import log_weights, reverse_ess
from bgp4.flows import coordinates
from bgp4.generator.losses import likelihood_loss
from bgp4.generator.model import build_generator
from bgp4.simulation.data import load_trajectory, train_test_split
from bgp4.simulation.energy import OpenMMEnergy


def p_phi_positive(xyz: np.ndarray, topology) -> dict[str, float]:
    quads, phi = mdtraj.compute_phi(mdtraj.Trajectory(xyz, topology))
    return {str(topology.atom(int(q[2])).residue): float((v > 0).mean()) for q, v in zip(quads, phi.T)}


def arm(data, widened: bool, steps: int, samples: int, every: int) -> dict:
    """Train one arm and measure its raw samples."""
    torch.manual_seed(0)
    molecule = data.molecule()
    keep = coordinates._narrow_scale if widened else (lambda u, mean, std: std)
    with mock.patch.object(coordinates, "_narrow_scale", keep):
        bg = build_generator("spline", data.xyz[::every], molecule, fix_constrained=False)
    train_idx, _ = train_test_split(data.n_frames, 0.1, 0)
    with torch.no_grad():
        y, logdet = bg.flow_coordinates(torch.as_tensor(data.xyz[train_idx]))
    optimizer = torch.optim.Adam(bg.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    batches = torch.Generator().manual_seed(1)
    start = time.monotonic()
    for _ in range(steps):
        idx = torch.randint(len(y), (512,), generator=batches)
        loss = likelihood_loss(bg, y[idx], logdet[idx]).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(bg.parameters(), 10.0)
        optimizer.step()
        schedule.step()
    wall = time.monotonic() - start
    with torch.no_grad(), OpenMMEnergy(molecule.system, temperature=300.0) as energy:
        s = bg.sample(samples, generator=torch.Generator().manual_seed(2))
        u = energy.reduced_energy(s.x).double().numpy()
    log_w = log_weights(u, s.log_q.double().numpy())
    log_w[~s.ok.numpy()] = -np.inf
    return {
        "widened": widened,
        "train_s": round(wall, 1),
        "final_batch_nll": float(loss.detach()),
        "reverse_ess": float(reverse_ess(log_w)),
        "p_phi_positive": p_phi_positive(s.x.numpy(), molecule.topology),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--every", type=int, default=5)
    args = parser.parse_args()
    data = load_trajectory(args.data)
    result = {"md_p_phi_positive": p_phi_positive(data.xyz, data.molecule().topology), "arms": []}
    for widened in (False, True):
        result["arms"].append(arm(data, widened, args.steps, args.samples, args.every))
        print(json.dumps(result["arms"][-1]), flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
