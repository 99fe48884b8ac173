"""The physics: molecules, MD, trajectory files and the OpenMM energy bridge (positions in nm, energies in kJ/mol).

Modules:
    molecule: the molecules bgp4 knows (built-in, sequence, PDB file) with their OpenMM system,
        topology, structure and z-matrix.
    system: force field, solvent and constraints of a molecule's OpenMM system.
    atoms: what a system says of its atoms: held bonds, a layout free of them, methyl-like rotors.
    structure: structures made ready for MD (hydrogens, force-field checks, minimization).
    md: Langevin MD in replica processes, resumable at any moment.
    ladder: the temperature ladder of replica exchange (TMIN:TMAX:N): parsing, checks, exchange rates.
    remd: replica exchange (parallel tempering) with openmmtools' multistate sampler.
    data: trajectory files (mdtraj HDF5) with the run's settings, and the MD cost they record.
    merge: several data files of one target in one training file.
    energy: OpenMM energies and forces as numpy arrays or a differentiable torch function.
    zmatrix: an automatic z-matrix from a molecule's bond graph.
    peptide: capped peptides built from an amino-acid sequence (ideal geometry, hydrogens, minimization).

This is the only layer that knows which molecule it is; it knows nothing of flows.
"""

__all__: list[str] = []
