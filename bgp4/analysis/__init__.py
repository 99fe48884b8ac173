"""Pure estimators on arrays: importance weights, ESS, TV, KL, W2, dF, and the figures.

Modules:
    weights: log weights, self-normalized weights, Kish ESS and its interval.
    residues: every residue's backbone torsions (phi, psi), for any peptide.
    grid: the Ramachandran grid (bins per axis) and its check.
    estimators: sample-quality metrics (Ramachandran histograms, free energies, distances, MD block errors).
    metrics: one JSON-ready dict of metrics per generator (per residue too).
    plots: the figures of the analysis stage; plots_residues: the per-residue Ramachandran figure;
        plots_training: the training curves (`bgp4 train`'s training.png).

Nothing here reads a run directory; energies are reduced (kT) unless a name says kJ/mol.
"""

__all__: list[str] = []
