"""Regenerate the built-in peptide structures shipped in bgp4/simulation/resources/.

    python run/scripts/build_peptides.py [--check]

Each built-in peptide (`bgp4.simulation.molecule.PEPTIDES`) is built with
`bgp4.simulation.peptide.build_capped_peptide` (ideal internal coordinates, hydrogens, a minimization)
and written as <name>.pdb. With --check nothing is written: exit 1 when a shipped file differs from a
fresh build by more than the PDB format's rounding (0.001 A, so 5e-5 nm) or in its atoms.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import openmm
import openmm.app as app

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bgp4.simulation.molecule import PEPTIDES  # noqa: E402
from bgp4.simulation.peptide import build_capped_peptide  # noqa: E402

__all__ = ["main"]

RESOURCES = Path(__file__).resolve().parents[2] / "bgp4" / "simulation" / "resources"


def _differs(path: Path, topology: app.Topology, positions: np.ndarray) -> bool:
    if not path.exists():
        return True
    pdb = app.PDBFile(str(path))
    names = [(a.residue.name, a.name) for a in topology.atoms()]
    if [(a.residue.name, a.name) for a in pdb.topology.atoms()] != names:
        return True
    shipped = pdb.getPositions(asNumpy=True).value_in_unit(openmm.unit.nanometer)
    return bool(np.abs(shipped - positions).max() > 6e-5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped files, write nothing")
    args = parser.parse_args()
    status = 0
    for name, sequence in PEPTIDES.items():
        topology, positions = build_capped_peptide(sequence)
        path = RESOURCES / f"{name}.pdb"
        if args.check:
            differs = _differs(path, topology, positions)
            print(f"{path.name}: {'differs' if differs else 'up to date'}")
            status |= int(differs)
            continue
        with open(path, "w") as handle:
            app.PDBFile.writeFile(topology, positions * 10.0 * openmm.unit.angstrom, handle, keepIds=True)
        print(f"wrote {path} ({topology.getNumAtoms()} atoms, Ace-{sequence}-Nme)")
    return status


if __name__ == "__main__":
    sys.exit(main())
