"""P(phi > 0) at a data file's temperature by well-tempered metadynamics on phi and psi: a check of
replica-exchange data where plain MD is too slow to cross, and where umbrella sampling along phi
alone leaves psi to relax by itself (two umbrella walks with 1 ns windows gave 0.022 and 0.0015:
run/results/benchmark-300K/data-checks.md). One walk of 50 ns takes about 35-55 min of one core.

    python run/scripts/metad_phi.py DATA.h5 --out WORK [--ns 50] [--seed 1] [--bias-factor 6]
        [--height 1.0] [--width 20] [--pace 500] [--chunk-ps 100] [--json F]

OpenMM's `Metadynamics` (openmm.app) biases the central residue's phi and psi (bgp4's
`Molecule.phi` and `.psi`) with Gaussians of --height kJ/mol and --width degrees every --pace MD
steps, tempered by --bias-factor; Langevin MD (LangevinMiddle, Reference platform) at DATA.h5's
temperature, time step and friction, from its first frame. The free energy of the final bias,
F(phi, psi) = -(T + dT) / dT V (kJ/mol, on OpenMM's grid: n points from -180 to 180 degrees on each
axis, the last repeating the first), gives P(phi > 0) = the share of exp(-F / kT) on the grid
points with phi > 0 (each point once; points on phi = 0 and -180 degrees count half). P from
the bias at the end of each tenth of the run shows whether it has settled; the spread of those in
the last half is a convergence measure, not a standard error: independent walks (--seed) give the
spread. Then DATA.h5's own P(phi > 0) (block standard error, 20 blocks).

WORK holds the settings and target (`metad.json`; another run's WORK is refused), OpenMM's bias
files (`bias/`: Metadynamics's own way to stop and resume), the MD state (`state.xml`), phi and psi
every ps of each finished chunk of --chunk-ps (`cv-NNNNN.npz`, rad) and P after each chunk
(`progress.json`). A rerun after a kill goes on from the last finished chunk, its Langevin noise
seeded with --seed again (a valid walk, not the frames an unbroken one would give); a kill in the
moment between a chunk's bias save and its progress save keeps that chunk's Gaussians on the rerun
too (at most --chunk-ps of deposits, late in the run small ones). One process per WORK (two would
each load the other's bias as a second walker's): a second run on a WORK in use stops at once
(`bgp4._io.exclusive`).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import openmm
from openmm import app, unit
from tqdm import tqdm

from bgp4._io import exclusive
from bgp4.analysis.estimators import N_BLOCKS, backbone_dihedrals, block_standard_error
from bgp4.errors import InputError
from bgp4.simulation.data import load_trajectory
from bgp4.simulation.molecule import kT

__all__ = ["p_phi_positive", "metadynamics", "run", "main"]

SETTING_KEYS = ("seed", "bias_factor", "height", "width", "pace", "chunk_ps")  # a walk's record; --ns may grow
TARGET_KEYS = ("molecule", "forcefield", "solvent", "constraints", "temperature", "timestep_fs", "friction")


def p_phi_positive(free_energy: np.ndarray, kt: float) -> float:
    """P(phi > 0) of a free energy (n_psi, n_phi) in kJ/mol on OpenMM's periodic grid (point i of an
    axis at -pi + 2 pi i / (n - 1): `Metadynamics` tabulates on linspace(min, max, n), the last point
    repeating the first, which is left out here), kt in kJ/mol; points on phi = 0 and -pi count half."""
    f = np.asarray(free_energy, dtype=np.float64)[:-1, :-1]
    marginal = np.exp(-(f - f.min()) / kt).sum(axis=0)
    phi = np.linspace(-np.pi, np.pi, marginal.size + 1)[:-1]
    share = np.where(np.isclose(phi, 0.0) | np.isclose(phi, -np.pi), 0.5, (phi > 0).astype(float))
    return float((marginal * share).sum() / marginal.sum())


def metadynamics(molecule, settings: dict, args: argparse.Namespace, bias_dir: Path, chunk: int):
    """The data file's system biased on (phi, psi) and its Simulation: (Metadynamics, Simulation);
    the bias is saved every `chunk` MD steps."""
    system = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(molecule.system))
    variables = []
    for atoms in (molecule.phi, molecule.psi):
        torsion = openmm.CustomTorsionForce("theta")
        torsion.addTorsion(*atoms, [])
        variables.append(app.BiasVariable(torsion, -math.pi, math.pi, math.radians(args.width), periodic=True))
    bias_dir.mkdir(parents=True, exist_ok=True)
    meta = app.Metadynamics(
        system,
        variables,
        settings["temperature"],
        args.bias_factor,
        args.height,
        args.pace,
        saveFrequency=chunk,
        biasDir=str(bias_dir),
    )
    integrator = openmm.LangevinMiddleIntegrator(
        settings["temperature"], settings["friction"], settings["timestep_fs"] / 1000.0
    )
    integrator.setRandomNumberSeed(args.seed)
    platform = openmm.Platform.getPlatformByName("Reference")
    return meta, app.Simulation(molecule.topology.to_openmm(), system, integrator, platform)


def _chunk_steps(args: argparse.Namespace, settings: dict) -> int:
    """MD steps a chunk: whole ps (phi and psi are kept every ps) and whole paces (the bias is saved
    at a chunk's end)."""
    per_ps, steps = 1000.0 / settings["timestep_fs"], args.chunk_ps * 1000.0 / settings["timestep_fs"]
    if per_ps != round(per_ps) or steps != round(steps) or round(steps) % math.lcm(round(per_ps), args.pace):
        raise InputError(
            f"--chunk-ps {args.chunk_ps:g} must be whole ps and whole paces of {args.pace} steps at the data's "
            f"{settings['timestep_fs']:g} fs step"
        )
    return round(steps)


def _checked(out: Path, mine: dict) -> None:
    """Refuse a WORK folder of another run, or one with chunks but no settings record."""
    path = out / "metad.json"
    if path.exists() and json.loads(path.read_text()) != mine:
        raise InputError(f"{out} holds a walk of other settings ({path.read_text().strip()}): use another --out")
    if not path.exists() and any(out.glob("cv-*.npz")):
        raise InputError(f"{out} holds chunks without a record of their settings: use another --out")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(mine) + "\n")


def run(data, out: Path, args: argparse.Namespace) -> tuple[float, list[list[float]]]:
    """Run (or go on with) the walk; P(phi > 0) of the final bias and [ns, P] after each chunk."""
    settings = data.settings
    chunk, kt = _chunk_steps(args, settings), kT(settings["temperature"])  # refused before anything is written
    _checked(out, {**{k: getattr(args, k) for k in SETTING_KEYS}, "data": {k: settings.get(k) for k in TARGET_KEYS}})
    meta, sim = metadynamics(data.molecule(), settings, args, out / "bias", chunk)
    progress_path, state_path = out / "progress.json", out / "state.xml"
    history = json.loads(progress_path.read_text()) if progress_path.exists() else []
    if history:
        sim.loadState(str(state_path))
    else:
        sim.context.setPositions(data.xyz[0].astype(np.float64))
        sim.context.setVelocitiesToTemperature(settings["temperature"], args.seed)
    steps_per_ps = round(1000.0 / settings["timestep_fs"])
    n_chunks = math.ceil(args.ns * 1e6 / settings["timestep_fs"] / chunk)
    sim.currentStep = len(history) * chunk
    for i in tqdm(range(len(history), n_chunks), desc="metadynamics chunks", unit="chunk"):
        cv = []
        for _ in range(chunk // steps_per_ps):
            meta.step(sim, steps_per_ps)
            cv.append(meta.getCollectiveVariables(sim))
        np.savez(out / f"cv-{i:05d}.npz", phi_psi=np.asarray(cv))
        history.append([sim.currentStep * settings["timestep_fs"] * 1e-6, p_phi_positive(_free_energy(meta), kt)])
        sim.saveState(str(state_path.with_suffix(".tmp")))
        state_path.with_suffix(".tmp").rename(state_path)
        progress_path.with_suffix(".tmp").write_text(json.dumps(history) + "\n")
        progress_path.with_suffix(".tmp").rename(progress_path)
    return p_phi_positive(_free_energy(meta), kt), history


def _free_energy(meta) -> np.ndarray:
    return meta.getFreeEnergy().value_in_unit(unit.kilojoule_per_mole)


def _settled(history: list[list[float]]) -> dict:
    """P at each tenth of the run and the spread (sd) of those in its last half."""
    ns = np.array([h[0] for h in history])
    tenths = [history[int(np.argmin(np.abs(ns - ns[-1] * j / 10)))] for j in range(1, 11)]
    last_half = np.array([h[1] for h in history if h[0] >= ns[-1] / 2])
    return {"tenths": tenths, "last_half_sd": float(last_half.std(ddof=1)) if last_half.size > 1 else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="bgp4 data file: molecule, system, temperature")
    parser.add_argument("--out", type=Path, required=True, help="work folder (bias, state, chunks)")
    parser.add_argument("--ns", type=float, default=50.0, help="ns of metadynamics MD")
    parser.add_argument("--seed", type=int, default=1, help="seed of the Langevin noise and velocities, 1-2^31-1")
    parser.add_argument("--bias-factor", type=float, default=6.0, help="well-tempered bias factor (> 1)")
    parser.add_argument("--height", type=float, default=1.0, help="initial Gaussian height, kJ/mol")
    parser.add_argument("--width", type=float, default=20.0, help="Gaussian width, degrees")
    parser.add_argument("--pace", type=int, default=500, help="MD steps between Gaussians")
    parser.add_argument("--chunk-ps", type=float, default=100.0, help="ps between saves of bias and state")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if not 1 <= args.seed < 2**31:  # OpenMM reads seed 0 as "a new seed each time"
        parser.error(f"--seed must be 1 to 2^31-1, got {args.seed}")
    if args.bias_factor <= 1 or min(args.height, args.width, args.ns, args.chunk_ps) <= 0 or args.pace < 1:
        parser.error("--bias-factor must be > 1 and --height, --width, --ns, --chunk-ps, --pace positive")
    data = load_trajectory(args.data, extras=("replica",))
    try:
        with exclusive(args.out):  # a second walk into one WORK folder would interleave its chunks
            p, history = run(data, args.out, args)
    except InputError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    phi, _ = backbone_dihedrals(data.xyz, data.molecule())
    positive = (phi > 0).astype(float)
    q, q_se = float(positive.mean()), block_standard_error(positive, data.extras.get("replica"), N_BLOCKS)
    settled = _settled(history)
    result = {
        "metadynamics": {"p_phi_positive": p, "ns": history[-1][0], **settled},
        "settings": {k: getattr(args, k) for k in SETTING_KEYS},
        "data": {"file": str(args.data), "p_phi_positive": q, "se": q_se},
    }
    print(
        f"metadynamics ({history[-1][0]:.1f} ns, seed {args.seed}): P(phi > 0) = {p:.4f} (sd over the last half "
        f"{settled['last_half_sd'] or float('nan'):.4f}); {args.data.name}: {q:.4f} +- {q_se:.4f}"
    )
    print("  P at each tenth:", ", ".join(f"{ns:.1f} ns {pj:.4f}" for ns, pj in settled["tenths"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
