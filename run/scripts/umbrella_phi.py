"""P(phi > 0) at a data file's temperature by umbrella sampling along phi and MBAR: a check of
replica-exchange data where plain MD is too slow to cross.

    python run/scripts/umbrella_phi.py DATA.h5 --out WORK [--windows 72] [--ps 1000] [--k 400] [--seed 17]
        [--first-ps T] [--json F]

DATA.h5 gives the molecule, its system (force field, solvent, constraints), the temperature, the
time step and the friction. Window i restrains the molecule's phi (bgp4's `Molecule.phi`, the
backbone phi of the central residue) around c_i = -180 + 360 i / windows degrees with the bias
0.5 k d^2 (k in kJ/mol/rad^2, d the periodic difference phi - c_i, rad), runs 20 ps of
equilibration and then --ps ps of Langevin MD (LangevinMiddle, Reference platform), keeping phi
every ps. Each window starts where the one before ended, so the restraint walks phi round the
circle. MBAR (pymbar) on the samples of every window, each thinned to its statistical
inefficiency, gives the unbiased P(phi > 0) with its standard error, and dF = -ln(P / (1 - P)) in kT.
Then DATA.h5's own P(phi > 0) (block standard error, 20 blocks) and z = difference / combined error.
--seed sets the Langevin noise and the windows' initial velocities (another seed: another walk);
--first-ps T also gives the estimate from each window's first T ps alone, to see whether slow
degrees of freedom (psi) relax within a window: if the estimate moves with the window length, the
shorter windows were too short (it is a subset of the same walk: a hint, not an independent check).

The restraint must hold phi on the steep side of the barrier near phi = 120-140 degrees: with
k = 100 and 36 windows no window sampled it, and the dipeptide's P(phi > 0) at 300 K came out
0.027 +- 0.005; with k = 400 and 72 windows (5 degrees apart) every window overlaps its neighbours.
The windows must also let psi settle, and along phi alone they need not: in some windows near the
barriers psi changes side a few times a nanosecond or not at all (one walk at phi = 15-50 degrees,
both at 135-175), so the walk carries its psi from window to window and MBAR, which sees only phi,
cannot correct for it. With
250 ps windows one walk gave 0.012 +- 0.003; with 1,000 ps two walks (seeds 18, 19) gave 0.022 +-
0.003 and 0.0015 +- 0.0002, 7 of their combined errors apart, the second with psi held on one side
through phi = 15-50 degrees (run/results/benchmark-300K/data-checks.md). The standard error of one walk does not
see this: compare walks, and prefer run/scripts/metad_phi.py, which biases psi as well.

WORK holds the run's settings and target (`umbrella.json`; the WORK of another run, or windows
without such a record, are refused: one line, exit code 2) and one file per finished window
(`window-NNN.npz`: phi and psi in rad, final positions in nm); a rerun after a kill goes on from
the last finished window (with the noise reseeded: a valid walk, not the frames an unbroken one
would give). One window of the dipeptide (1.02 ns) takes about 35 s on a free core (72 windows:
73 ns of MD, 42 min). One process per WORK: a second run on a WORK in use stops at once
(`bgp4._io.exclusive`).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import openmm
from tqdm import tqdm

from bgp4._io import exclusive
from bgp4.analysis.estimators import N_BLOCKS, backbone_dihedrals, block_standard_error
from bgp4.errors import InputError
from bgp4.simulation.data import load_trajectory
from bgp4.simulation.molecule import kT

__all__ = ["biased_context", "velocity_seed", "run_windows", "mbar_p_positive", "windows_mbar", "main"]

EQUILIBRATION_PS = 20.0


def biased_context(molecule, settings: dict, k: float, seed: int = 17) -> openmm.Context:
    """The data file's system with a periodic harmonic restraint on phi (centre: parameter phi0, rad)."""
    system = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(molecule.system))
    restraint = openmm.CustomTorsionForce(
        "0.5*k_phi*d^2; d = min(a, 2*pi - a); a = abs(theta - phi0); pi = 3.141592653589793"
    )
    restraint.addGlobalParameter("k_phi", k)
    restraint.addGlobalParameter("phi0", 0.0)
    restraint.addTorsion(*molecule.phi, [])
    system.addForce(restraint)
    integrator = openmm.LangevinMiddleIntegrator(
        settings["temperature"], settings["friction"], settings["timestep_fs"] / 1000.0
    )
    integrator.setRandomNumberSeed(seed)
    return openmm.Context(system, integrator, openmm.Platform.getPlatformByName("Reference"))


TARGET_KEYS = ("molecule", "forcefield", "solvent", "constraints", "temperature", "timestep_fs", "friction")
MAX_SEED, MAX_WINDOWS = 1_000_000, 900  # every velocity seed distinct and within OpenMM's int32


def velocity_seed(seed: int, window: int) -> int:
    """The initial velocities' seed of a window, distinct for every seed in 1..MAX_SEED and window
    below MAX_WINDOWS (seed 17, the first runs': 100 + window)."""
    return 100 + window + 1000 * (seed - 17) if seed >= 17 else 1_500_000_000 + 1000 * seed + window


def _record(out: Path, mine: dict) -> None:
    """Keep the run's settings in `out`, refusing a folder of another run (or of an older script
    that kept none) so that windows of different runs never mix."""
    record = out / "umbrella.json"
    if record.exists():
        if json.loads(record.read_text()) != mine:
            raise InputError(f"{out} holds windows of another run ({record.read_text().strip()}): use another --out")
    elif any(out.glob("window-*.npz")):
        raise InputError(f"{out} holds windows without a record of their settings: use another --out")
    record.write_text(json.dumps(mine) + "\n")


def run_windows(data, out: Path, windows: int, ps: float, k: float, seed: int = 17) -> list[np.ndarray]:
    """phi samples (rad) of every window, running those that are not in `out` yet."""
    molecule, settings = data.molecule(), data.settings
    out.mkdir(parents=True, exist_ok=True)
    system = {key: settings.get(key) for key in TARGET_KEYS}
    _record(out, {"windows": windows, "ps": ps, "k": k, "seed": seed, "data": system})
    context = biased_context(molecule, settings, k, seed)
    steps_per_ps = round(1000.0 / settings["timestep_fs"])
    positions, samples = data.xyz[0].astype(np.float64), []
    for i in tqdm(range(windows), desc="umbrella windows", unit="window"):
        path = out / f"window-{i:03d}.npz"
        if not path.exists():
            context.setParameter("phi0", math.radians(-180.0 + 360.0 * i / windows))
            context.setPositions(positions)
            context.setVelocitiesToTemperature(settings["temperature"], velocity_seed(seed, i))
            context.getIntegrator().step(round(EQUILIBRATION_PS * steps_per_ps))
            kept = []
            for _ in range(round(ps)):
                context.getIntegrator().step(steps_per_ps)
                kept.append(context.getState(getPositions=True).getPositions(asNumpy=True)._value)
            phi, psi = backbone_dihedrals(np.asarray(kept), molecule)
            tmp = path.with_suffix(".tmp.npz")
            np.savez(tmp, phi=phi, psi=psi, positions=kept[-1])
            tmp.rename(path)
        window = np.load(path)
        if len(window["phi"]) != round(ps):  # phi is kept once a ps
            raise InputError(f"{path} holds {len(window['phi'])} ps, not {round(ps)}: use another --out")
        positions = window["positions"]
        samples.append(window["phi"])
    return samples


def mbar_p_positive(samples: list[np.ndarray], k: float, kt: float) -> tuple[float, float]:
    """Unbiased P(phi > 0) and its standard error from the windows' phi samples (MBAR)."""
    mbar, phi = windows_mbar(samples, k, kt)
    result = mbar.compute_expectations((phi > 0).astype(float), u_kn=np.zeros(phi.size))
    return float(np.ravel(result["mu"])[0]), float(np.ravel(result["sigma"])[0])


def windows_mbar(samples: list[np.ndarray], k: float, kt: float):
    """pymbar's MBAR over the windows' phi samples, each thinned to its statistical inefficiency,
    and those samples (rad); `mbar.f_k` are the windows' free energies (kT)."""
    from pymbar import MBAR, timeseries

    windows = len(samples)
    centres = np.radians(-180.0 + 360.0 * np.arange(windows) / windows)
    thinned = [s[timeseries.subsample_correlated_data(np.unwrap(s))] for s in samples]
    phi = np.concatenate(thinned)
    d = np.abs(phi[None, :] - centres[:, None])
    d = np.minimum(d, 2 * np.pi - d)
    u_kn = 0.5 * k * d**2 / kt  # kt: kJ/mol; the unbiased energy is common to every window and cancels
    return MBAR(u_kn, np.array([len(s) for s in thinned])), phi


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="bgp4 data file: molecule, system, temperature")
    parser.add_argument("--out", type=Path, required=True, help="work folder (one file per window)")
    parser.add_argument("--windows", type=int, default=72, help="windows round the circle")
    parser.add_argument("--ps", type=float, default=1000.0, help="ps of MD per window after 20 ps of equilibration")
    parser.add_argument("--k", type=float, default=400.0, help="restraint force constant, kJ/mol/rad^2")
    parser.add_argument("--seed", type=int, default=17, help=f"seed of the Langevin noise and velocities, 1-{MAX_SEED}")
    parser.add_argument("--first-ps", type=int, help="also the estimate from each window's first FIRST_PS ps")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if not 1 <= args.seed <= MAX_SEED:  # OpenMM reads seed 0 as "a new seed each time"
        parser.error(f"--seed must be 1-{MAX_SEED}, got {args.seed}")
    if not 1 <= args.windows <= MAX_WINDOWS:
        parser.error(f"--windows must be 1-{MAX_WINDOWS}, got {args.windows}")
    if args.first_ps is not None and not 1 <= args.first_ps < args.ps:
        parser.error(f"--first-ps must be a whole number of ps from 1 to below --ps, got {args.first_ps}")
    data = load_trajectory(args.data, extras=("replica",))
    try:
        with exclusive(args.out):  # a second walk into one WORK folder would write the same windows
            samples = run_windows(data, args.out, args.windows, args.ps, args.k, args.seed)
    except InputError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    p, p_se = mbar_p_positive(samples, args.k, kT(data.settings["temperature"]))
    phi, _ = backbone_dihedrals(data.xyz, data.molecule())
    positive = (phi > 0).astype(float)
    q, q_se = float(positive.mean()), block_standard_error(positive, data.extras.get("replica"), N_BLOCKS)
    z = (q - p) / math.hypot(p_se, q_se)
    result = {
        "umbrella": {"p_phi_positive": p, "se": p_se, "dF_kT": -math.log(p / (1 - p)), "windows": args.windows},
        "settings": {"ps": args.ps, "k": args.k, "seed": args.seed},
        "umbrella_ns": args.windows * (args.ps + EQUILIBRATION_PS) / 1000.0,
        "data": {"file": str(args.data), "p_phi_positive": q, "se": q_se},
        "z": z,
    }
    print(
        f"umbrella ({args.windows} windows x {args.ps:g} ps, k = {args.k:g} kJ/mol/rad^2): P(phi > 0) = {p:.4f} "
        f"+- {p_se:.4f}, dF = {result['umbrella']['dF_kT']:.2f} kT; {args.data.name}: {q:.4f} +- {q_se:.4f}; "
        f"z = {z:+.2f} ({'agree within 2 SE' if abs(z) < 2 else 'DIFFER by more than 2 SE'})"
    )
    if args.first_ps is not None:  # phi is kept once a ps
        first = [w[: args.first_ps] for w in samples]
        p1, p1_se = mbar_p_positive(first, args.k, kT(data.settings["temperature"]))
        result["first_ps"] = {"ps": args.first_ps, "p_phi_positive": p1, "se": p1_se}
        print(f"  from each window's first {args.first_ps:g} ps alone: P(phi > 0) = {p1:.4f} +- {p1_se:.4f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
