"""Capped peptides built from an amino-acid sequence, offline: Ace-<sequence>-Nme.

`build_capped_peptide("AAA")` places the heavy atoms from ideal internal coordinates (bond lengths
and angles of a standard peptide; backbone in the polyproline II region, phi = -75, psi = 145,
omega = 180 degrees; side chains at a common rotamer, chi1 = -60 degrees where there is one), adds
the hydrogens with OpenMM's `Modeller.addHydrogens` for the force field, and minimizes the energy
in the molecule's own system (amber99sb-ildn + amber96 OBC implicit solvent, no cutoff, X-H
bonds constrained), as alanine dipeptide's. Nothing is downloaded.

Units: bond lengths in the tables below in Angstrom and angles in degrees (how they are usually
quoted); positions returned in nm, energies in kJ/mol.
"""

from __future__ import annotations

import re

import numpy as np
import openmm.app as app

from bgp4.errors import InputError
from bgp4.simulation.structure import prepare_structure
from bgp4.simulation.system import SystemSpec

__all__ = [
    "AMINO_ACIDS",
    "check_sequence",
    "place_atom",
    "heavy_atom_structure",
    "build_capped_peptide",
]

#: One-letter code -> residue name (the 20 standard amino acids; HIS gets its protonation from addHydrogens).
AMINO_ACIDS = {
    "A": "ALA", "R": "ARG", "N": "ASN", "D": "ASP", "C": "CYS", "Q": "GLN", "E": "GLU", "G": "GLY",
    "H": "HIS", "I": "ILE", "L": "LEU", "K": "LYS", "M": "MET", "F": "PHE", "P": "PRO", "S": "SER",
    "T": "THR", "W": "TRP", "Y": "TYR", "V": "VAL",
}  # fmt: skip
#: Three-letter code -> one-letter code.
_THREE_LETTER = {name: letter for letter, name in AMINO_ACIDS.items()}

#: Side-chain heavy atoms beyond CB: (atom, bond partner, angle partner, torsion partner,
#: bond / Angstrom, angle / degree, torsion / degree). Torsions give the rotamer (chi1 = -60 degrees,
#: further chis 180 degrees) and keep rings planar; the minimization settles the details.
_SIDE_CHAINS: dict[str, list[tuple[str, str, str, str, float, float, float]]] = {
    "ALA": [],
    "GLY": [],
    "SER": [("OG", "CB", "CA", "N", 1.42, 111.0, -60.0)],
    "CYS": [("SG", "CB", "CA", "N", 1.81, 114.0, -60.0)],
    "VAL": [("CG1", "CB", "CA", "N", 1.53, 110.7, 180.0), ("CG2", "CB", "CA", "N", 1.53, 110.4, -60.0)],
    # THR and ILE: the chi1 atom at chi1, CG2 at chi1 - 120 degrees (the natural 2S,3R / 2S,3S isomers).
    "THR": [("OG1", "CB", "CA", "N", 1.43, 109.2, 60.0), ("CG2", "CB", "CA", "N", 1.53, 111.1, -60.0)],
    "ILE": [
        ("CG1", "CB", "CA", "N", 1.53, 110.4, -60.0),
        ("CG2", "CB", "CA", "N", 1.53, 110.5, 180.0),
        ("CD1", "CG1", "CB", "CA", 1.52, 113.8, 180.0),
    ],
    "LEU": [
        ("CG", "CB", "CA", "N", 1.53, 116.3, -60.0),
        ("CD1", "CG", "CB", "CA", 1.52, 110.7, 180.0),
        ("CD2", "CG", "CB", "CA", 1.52, 110.7, 60.0),
    ],
    "MET": [
        ("CG", "CB", "CA", "N", 1.52, 114.1, -60.0),
        ("SD", "CG", "CB", "CA", 1.81, 112.7, 180.0),
        ("CE", "SD", "CG", "CB", 1.79, 100.8, 180.0),
    ],
    "PRO": [("CG", "CB", "CA", "N", 1.50, 104.5, 30.0), ("CD", "CG", "CB", "CA", 1.51, 105.5, -35.0)],
    "ASP": [
        ("CG", "CB", "CA", "N", 1.52, 113.0, -60.0),
        ("OD1", "CG", "CB", "CA", 1.25, 119.0, -90.0),
        ("OD2", "CG", "CB", "CA", 1.25, 119.0, 90.0),
    ],
    "ASN": [
        ("CG", "CB", "CA", "N", 1.52, 113.0, -60.0),
        ("OD1", "CG", "CB", "CA", 1.23, 120.8, -60.0),
        ("ND2", "CG", "CB", "CA", 1.33, 116.4, 120.0),
    ],
    "GLU": [
        ("CG", "CB", "CA", "N", 1.52, 114.0, -60.0),
        ("CD", "CG", "CB", "CA", 1.52, 113.0, 180.0),
        ("OE1", "CD", "CG", "CB", 1.25, 119.0, 0.0),
        ("OE2", "CD", "CG", "CB", 1.25, 119.0, 180.0),
    ],
    "GLN": [
        ("CG", "CB", "CA", "N", 1.52, 114.0, -60.0),
        ("CD", "CG", "CB", "CA", 1.52, 113.0, 180.0),
        ("OE1", "CD", "CG", "CB", 1.23, 120.8, 0.0),
        ("NE2", "CD", "CG", "CB", 1.33, 116.4, 180.0),
    ],
    "LYS": [
        ("CG", "CB", "CA", "N", 1.52, 114.0, -60.0),
        ("CD", "CG", "CB", "CA", 1.52, 111.0, 180.0),
        ("CE", "CD", "CG", "CB", 1.52, 111.0, 180.0),
        ("NZ", "CE", "CD", "CG", 1.49, 112.0, 180.0),
    ],
    "ARG": [
        ("CG", "CB", "CA", "N", 1.52, 114.0, -60.0),
        ("CD", "CG", "CB", "CA", 1.52, 111.0, 180.0),
        ("NE", "CD", "CG", "CB", 1.46, 112.0, 180.0),
        ("CZ", "NE", "CD", "CG", 1.33, 124.0, 180.0),
        ("NH1", "CZ", "NE", "CD", 1.33, 120.0, 0.0),
        ("NH2", "CZ", "NE", "CD", 1.33, 120.0, 180.0),
    ],
    "PHE": [
        ("CG", "CB", "CA", "N", 1.50, 114.0, -60.0),
        ("CD1", "CG", "CB", "CA", 1.39, 120.7, 90.0),
        ("CD2", "CG", "CB", "CA", 1.39, 120.7, -90.0),
        ("CE1", "CD1", "CG", "CB", 1.39, 120.0, 180.0),
        ("CE2", "CD2", "CG", "CB", 1.39, 120.0, 180.0),
        ("CZ", "CE1", "CD1", "CG", 1.39, 120.0, 0.0),
    ],
    "TYR": [
        ("CG", "CB", "CA", "N", 1.51, 114.0, -60.0),
        ("CD1", "CG", "CB", "CA", 1.39, 120.8, 90.0),
        ("CD2", "CG", "CB", "CA", 1.39, 120.8, -90.0),
        ("CE1", "CD1", "CG", "CB", 1.39, 121.2, 180.0),
        ("CE2", "CD2", "CG", "CB", 1.39, 121.2, 180.0),
        ("CZ", "CE1", "CD1", "CG", 1.38, 119.6, 0.0),
        ("OH", "CZ", "CE1", "CD1", 1.38, 119.9, 180.0),
    ],
    "TRP": [
        ("CG", "CB", "CA", "N", 1.50, 114.0, -60.0),
        ("CD1", "CG", "CB", "CA", 1.37, 127.0, 90.0),
        ("CD2", "CG", "CB", "CA", 1.43, 126.6, -90.0),
        ("NE1", "CD1", "CG", "CB", 1.38, 110.2, 180.0),
        ("CE2", "CD2", "CG", "CB", 1.41, 107.2, 180.0),
        ("CE3", "CD2", "CG", "CB", 1.40, 133.9, 0.0),
        ("CZ2", "CE2", "CD2", "CG", 1.40, 122.4, 180.0),
        ("CZ3", "CE3", "CD2", "CG", 1.39, 118.7, 180.0),
        ("CH2", "CZ2", "CE2", "CD2", 1.37, 117.5, 0.0),
    ],
    "HIS": [
        ("CG", "CB", "CA", "N", 1.50, 114.0, -60.0),
        ("ND1", "CG", "CB", "CA", 1.38, 122.7, -90.0),
        ("CD2", "CG", "CB", "CA", 1.36, 131.0, 90.0),
        ("CE1", "ND1", "CG", "CB", 1.32, 109.0, 180.0),
        ("NE2", "CD2", "CG", "CB", 1.37, 107.0, 180.0),
    ],
}

#: Ring bonds the side-chain tables above do not make (the atom that closes each ring).
_RING_BONDS = {
    "PRO": [("CD", "N")],
    "PHE": [("CE2", "CZ")],
    "TYR": [("CE2", "CZ")],
    "TRP": [("NE1", "CE2"), ("CZ3", "CH2")],
    "HIS": [("CE1", "NE2")],
}

# Backbone geometry (Angstrom, degrees): peptide-bond values of Engh and Huber, rounded.
_N_CA, _CA_C, _C_N, _C_O, _CA_CB = 1.458, 1.525, 1.329, 1.231, 1.530
_C_N_CA, _N_CA_C, _CA_C_N, _CA_C_O, _N_CA_CB = 121.7, 111.2, 116.2, 120.5, 110.5
#: Torsion C-N-CA-CB of an L-amino acid, with the residue's own carbonyl C (alanine dipeptide's is
#: -120 degrees; with the previous residue's C it would be about +60).
_L_CB_TORSION = -122.5
#: Backbone torsions of the built structure: polyproline II, trans peptide bonds.
PHI, PSI, OMEGA = -75.0, 145.0, 180.0
_ELEMENTS = {"C": app.element.carbon, "N": app.element.nitrogen, "O": app.element.oxygen, "S": app.element.sulfur}


def check_sequence(sequence: str) -> str:
    """`sequence` as upper-case one-letter codes; raises InputError naming any code that is not a
    standard amino acid.

    One-letter codes run together (`AAA`, any case). Codes separated by `-`, spaces or commas may be
    one- or three-letter (`Ala-Ala-Ala`, `ALA GLY`, `A-L-A`). A lone three-letter code without a
    separator (`ala`, `GLY`) is refused as ambiguous: it reads as three residues in one-letter codes.

    >>> check_sequence("Ala-Gly-Ser"), check_sequence("agS")
    ('AGS', 'AGS')
    """
    text = str(sequence).strip().upper()
    if not text:
        raise InputError("the peptide sequence is empty; give one-letter amino-acid codes such as AAA")
    tokens = [t for t in re.split(r"[-,\s]+", text) if t]
    if len(tokens) == 1:  # run-together one-letter codes
        if text in _THREE_LETTER:
            raise InputError(
                f"sequence {str(sequence).strip()!r} is ambiguous: as one-letter codes it is "
                f"{'-'.join(text)}; write {_THREE_LETTER[text]} for one {text.capitalize()}, "
                f"or separate the codes ({'-'.join(text)})"
            )
        tokens = list(text)
    bad = sorted({t for t in tokens if t not in AMINO_ACIDS and t not in _THREE_LETTER})
    if bad:
        raise InputError(
            f"sequence {text!r}: {', '.join(repr(t) for t in bad)} is no amino acid "
            f"(one-letter codes: {''.join(sorted(AMINO_ACIDS))}, or three-letter codes separated by -)"
        )
    return "".join(_THREE_LETTER.get(t, t) for t in tokens)


def place_atom(a: np.ndarray, b: np.ndarray, c: np.ndarray, bond: float, angle: float, torsion: float) -> np.ndarray:
    """NeRF: the point d with |cd| = bond, angle(b, c, d) = angle and dihedral(a, b, c, d) = torsion (rad)."""
    bc = (c - b) / np.linalg.norm(c - b)
    normal = np.cross(b - a, bc)
    normal /= np.linalg.norm(normal)
    frame = np.stack([bc, np.cross(normal, bc), normal], axis=1)
    local = bond * np.array([-np.cos(angle), np.sin(angle) * np.cos(torsion), np.sin(angle) * np.sin(torsion)])
    return c + frame @ local


def _place(atoms: dict, key, refs: tuple, bond: float, angle: float, torsion: float) -> None:
    """Put `key` at (bond Angstrom, angle degree, torsion degree) from the three placed atoms `refs`."""
    a, b, c = (atoms[r] for r in refs)
    atoms[key] = place_atom(a, b, c, bond, np.radians(angle), np.radians(torsion))


def heavy_atom_structure(residues: list[str]) -> dict[tuple[int, str], np.ndarray]:
    """Heavy-atom positions (Angstrom) keyed (residue index, atom name) of ACE + `residues` + NME."""
    atoms: dict[tuple[int, str], np.ndarray] = {
        (0, "CH3"): np.zeros(3),
        (0, "C"): np.array([1.52, 0.0, 0.0]),
    }
    angle = np.radians(_CA_C_N)
    atoms[(1, "N")] = atoms[(0, "C")] + _C_N * np.array([-np.cos(angle), np.sin(angle), 0.0])
    previous = (0, "CH3")  # the atom before C in the chain: ACE's methyl, then each CA
    for i, name in enumerate(residues, start=1):
        c_prev = (i - 1, "C")
        _place(atoms, (i, "CA"), (previous, c_prev, (i, "N")), _N_CA, _C_N_CA, OMEGA)
        _place(atoms, (i, "C"), (c_prev, (i, "N"), (i, "CA")), _CA_C, _N_CA_C, PHI)
        _place(atoms, (i + 1, "N"), ((i, "N"), (i, "CA"), (i, "C")), _C_N, _CA_C_N, PSI)
        if name != "GLY":
            _place(atoms, (i, "CB"), ((i, "C"), (i, "N"), (i, "CA")), _CA_CB, _N_CA_CB, _L_CB_TORSION)
        for atom, *refs, bond, ang, tor in _SIDE_CHAINS[name]:  # refs: bond, angle, torsion partner
            _place(atoms, (i, atom), tuple((i, r) for r in reversed(refs)), bond, ang, tor)
        previous = (i, "CA")
    last = len(residues) + 1
    _place(atoms, (last, "C"), (previous, (last - 1, "C"), (last, "N")), _N_CA, _C_N_CA, OMEGA)
    for i in range(last):  # carbonyl O in the peptide plane, trans to the next N across C
        before = (0, "CH3") if i == 0 else (i, "CA")
        _place(atoms, (i, "O"), ((i + 1, "N"), before, (i, "C")), _C_O, _CA_C_O, 180.0)
    return atoms


def _atom_names(name: str) -> list[str]:
    """Heavy-atom names of residue `name` in PDB order."""
    if name == "ACE":
        return ["CH3", "C", "O"]
    if name == "NME":
        return ["N", "C"]
    return ["N", "CA", "C", "O"] + ([] if name == "GLY" else ["CB"]) + [row[0] for row in _SIDE_CHAINS[name]]


def _bonds(name: str) -> list[tuple[str, str]]:
    """Heavy-atom bonds inside residue `name`."""
    if name == "ACE":
        return [("CH3", "C"), ("C", "O")]
    if name == "NME":
        return [("N", "C")]
    bonds = [("N", "CA"), ("CA", "C"), ("C", "O")] + ([] if name == "GLY" else [("CA", "CB")])
    return bonds + [(row[1], row[0]) for row in _SIDE_CHAINS[name]] + _RING_BONDS.get(name, [])


def _heavy_topology(residues: list[str]) -> tuple[app.Topology, np.ndarray]:
    """OpenMM topology (heavy atoms, bonds) of ACE + `residues` + NME and its positions in nm."""
    placed = heavy_atom_structure(residues)
    topology = app.Topology()
    chain = topology.addChain()
    names = ["ACE", *residues, "NME"]
    index: dict[tuple[int, str], app.topology.Atom] = {}
    positions = []
    for i, name in enumerate(names):
        residue = topology.addResidue(name, chain, id=str(i + 1))
        for atom in _atom_names(name):
            index[(i, atom)] = topology.addAtom(atom, _ELEMENTS[atom[0]], residue)
            positions.append(placed[(i, atom)])
    for i, name in enumerate(names):
        for a, b in _bonds(name):
            topology.addBond(index[(i, a)], index[(i, b)])
        if i + 1 < len(names):  # the peptide bond to the next residue
            topology.addBond(index[(i, "C")], index[(i + 1, "N")])
    return topology, np.asarray(positions) / 10.0


def build_capped_peptide(sequence: str, spec: SystemSpec = SystemSpec()) -> tuple[app.Topology, np.ndarray]:
    """Ace-`sequence`-Nme: OpenMM topology with hydrogens and minimized positions (n_atoms, 3) in nm.

    Raises InputError for a letter that is no amino acid, a residue that matches no force-field
    template, or a minimized energy that is not finite and low (`prepare_structure`).
    """
    sequence = check_sequence(sequence)
    topology, heavy = _heavy_topology([AMINO_ACIDS[c] for c in sequence])
    return prepare_structure(topology, heavy, spec, label=f"Ace-{sequence}-Nme")
