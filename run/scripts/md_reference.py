"""dF(phi > 0) of long MD with block standard errors, and of reweighted samples against it.

    python run/scripts/md_reference.py MD.h5 [MD2.h5 | OUT.h5.partial ...] [--block-ns 10]
                                       [--samples RUN/samples-refined.h5 ...] [--bootstrap 1000]
                                       [--residue ALA3]

MD: every file's frames are split per replica into contiguous blocks of `--block-ns` ns; P(phi > 0)
is pooled over simulated time, its standard error is that of the block means (blocks weighted by their
length), and dF = -ln(P / (1 - P)) in kT with the delta-method error SE_P / (P (1 - P)). A
`<out>.partial` directory of a `bgp4 simulate` still running counts with the whole frames its
replicas have written so far.
Samples (`bgp4 sample` files): P and dF reweighted by exp(log_w), with a bootstrap 95 % interval
over samples (over lineages when the file has `ancestor`, SMC), and the difference from the MD
reference with its combined standard error (MD blocks and the samples' bootstrap spread).
phi is the molecule's own (a peptide's central residue), or with `--residue` that residue's (mdtraj's
label, as the per-residue report names it). Prints `name: value` lines.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bgp4.analysis.estimators import backbone_dihedrals, state_free_energy  # noqa: E402
from bgp4.analysis.residues import dihedral_angles, residue_torsions  # noqa: E402
from bgp4.generator.sample import REFINED_EXTRAS  # noqa: E402
from bgp4.simulation._records import FRAMES_FILE, record_dtype  # noqa: E402
from bgp4.simulation.data import load_trajectory  # noqa: E402
from bgp4.simulation.molecule import get_molecule  # noqa: E402

__all__ = ["phi_of", "md_blocks", "weighted_se", "df_error", "reweighted", "main"]


def _frames(path: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """(xyz (n, atoms, 3) nm, replica (n,), settings) of an MD file or of a running simulation's
    `.partial` directory (the whole records each replica has written so far)."""
    if path.is_dir():
        settings = json.loads((path / "settings.json").read_text())
        molecule = get_molecule(settings["molecule"])
        record = record_dtype(molecule.n_atoms)
        files = [path / FRAMES_FILE.format(r) for r in range(settings["replicas"])]
        # a replica still equilibrating has no frames file yet
        parts = [
            np.fromfile(f, dtype=record, count=f.stat().st_size // record.itemsize)
            if f.exists()
            else np.zeros(0, dtype=record)
            for f in files
        ]
        return (
            np.concatenate([p["xyz"] for p in parts]),
            np.repeat(np.arange(len(parts)), [len(p) for p in parts]),
            settings,
        )
    data = load_trajectory(path, extras=("replica",))
    replica = data.extras.get("replica", np.zeros(data.n_frames, dtype=int))
    return data.xyz, np.asarray(replica), data.settings


def phi_of(xyz: np.ndarray, molecule, residue: str = "") -> np.ndarray:
    """(n,) phi in radians: the molecule's own, or that of the residue labelled `residue`."""
    if not residue:
        return backbone_dihedrals(xyz, molecule)[0]
    quartets = {r.label: r.phi for r in residue_torsions(molecule)}
    if residue not in quartets:
        raise SystemExit(f"no residue {residue!r} with phi and psi; the molecule has {', '.join(quartets)}")
    return dihedral_angles(xyz, molecule, [quartets[residue]])[:, 0]


def md_blocks(path: Path, block_ns: float, residue: str = "") -> tuple[np.ndarray, np.ndarray]:
    """(P(phi > 0) per block, ns per block) of one MD file, blocks contiguous within a replica.
    Blocks are weighed by simulated time, so files saved at other intervals pool correctly."""
    xyz, replica, s = _frames(path)
    frame_ns = s["timestep_fs"] * s["save_every"] * 1e-6
    frames_per_block = max(1, int(round(block_ns / frame_ns)))
    positive = phi_of(xyz, get_molecule(s["molecule"]), residue) > 0
    shares, sizes = [], []
    for r in np.unique(replica):
        mine = positive[replica == r]
        for start in range(0, len(mine), frames_per_block):
            block = mine[start : start + frames_per_block]
            if len(block) >= frames_per_block // 2:  # a short tail block would get a noisy share
                shares.append(block.mean())
                sizes.append(len(block) * frame_ns)
    return np.array(shares), np.array(sizes, dtype=float)


def weighted_se(shares: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    """(pooled mean, its standard error) of block means weighted by block length; the error is
    nan with fewer than two blocks (block variance taken proportional to 1 / length)."""
    if len(shares) < 2:
        return (float(shares[0]) if len(shares) else math.nan), math.nan
    w = sizes / sizes.sum()
    mean = float(np.sum(w * shares))
    var = float(np.sum(w * (shares - mean) ** 2)) / (len(shares) - 1)
    return mean, float(np.sqrt(var))


def df_error(p: float, se: float) -> float:
    """Standard error of dF = -ln(P / (1 - P)) by the delta method (nan at P = 0 or 1)."""
    return se / (p * (1 - p)) if 0 < p < 1 else math.nan


def reweighted(path: Path, n_boot: int, seed: int = 0, residue: str = "") -> tuple[float, np.ndarray]:
    """(P(phi > 0) reweighted, bootstrap draws of it) of one samples file."""
    data = load_trajectory(path, extras=REFINED_EXTRAS)
    phi = phi_of(data.xyz, data.molecule(), residue)
    log_w = np.asarray(data.extras["log_w"], dtype=np.float64)
    w = np.where(np.isfinite(log_w), np.exp(log_w - np.max(log_w[np.isfinite(log_w)])), 0.0)
    hit = (phi > 0) & np.isfinite(phi)
    units = np.asarray(data.extras.get("ancestor", np.arange(len(w))))
    _, unit = np.unique(units, return_inverse=True)
    w_unit, hit_unit = np.bincount(unit, weights=w), np.bincount(unit, weights=w * hit)
    rng = np.random.default_rng(seed)
    draws = np.empty(n_boot)
    for b in range(n_boot):
        pick = rng.integers(0, len(w_unit), len(w_unit))
        draws[b] = hit_unit[pick].sum() / w_unit[pick].sum()
    return float(hit_unit.sum() / w_unit.sum()), draws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("md", type=Path, nargs="+", help="MD files (bgp4 simulate)")
    parser.add_argument("--block-ns", type=float, default=10.0)
    parser.add_argument("--samples", type=Path, nargs="*", default=[])
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--residue", default="", help="phi of this residue (e.g. ALA3); default the molecule's own")
    a = parser.parse_args()
    shares, sizes = [], []
    for path in a.md:
        s, n = md_blocks(path, a.block_ns, a.residue)
        if not len(s):
            print(f"md {path}: no complete block of {a.block_ns:g} ns yet, left out")
            continue
        p, se = weighted_se(s, n)
        print(
            f"md {path}: {n.sum():.0f} ns  blocks {len(s)} of {a.block_ns:g} ns  P(phi>0) {p:.4f} +- {se:.4f}"
            f"  dF {state_free_energy(p):.3f} +- {df_error(p, se):.3f} kT  block range {s.min():.3f}..{s.max():.3f}"
        )
        shares.append(s)
        sizes.append(n)
    if not shares:
        raise SystemExit("no MD block to compare with")
    p_md, se_md = weighted_se(np.concatenate(shares), np.concatenate(sizes))
    df_md, df_se = state_free_energy(p_md), df_error(p_md, se_md)
    print(
        f"md pooled: {sum(n.sum() for n in sizes):.0f} ns  blocks {sum(len(s) for s in shares)}"
        f"  P(phi>0) {p_md:.4f} +- {se_md:.4f}  dF {df_md:.3f} +- {df_se:.3f} kT"
    )
    for path in a.samples:
        p, draws = reweighted(path, a.bootstrap, residue=a.residue)
        df, df_draws = state_free_energy(p), np.array([state_free_energy(d) for d in draws])
        finite = np.isfinite(df_draws)  # a draw without any weighted phi > 0 sample has dF = inf
        low, high = np.percentile(df_draws[finite], [2.5, 97.5]) if finite.any() else (math.nan, math.nan)
        diff, se = df - df_md, float(np.hypot(np.std(df_draws[finite]), df_se)) if finite.any() else math.nan
        print(
            f"samples {path}: P(phi>0) {p:.4f}  dF {df:.3f} [{low:.3f}, {high:.3f}] kT"
            f"  minus MD {diff:+.3f} +- {se:.3f} kT"
            f"  within 0.05 kT: {'yes' if abs(diff) <= 0.05 else 'no'}"
            + (
                f"  ({(~finite).sum()} of {len(finite)} bootstrap draws without phi > 0, left out)"
                if not finite.all()
                else ""
            )
        )


if __name__ == "__main__":
    main()
