"""Pure estimators on arrays: importance weights, ESS, TV, KL, W2, dF, and the figures.

Modules:
    weights: log weights, self-normalized weights, Kish ESS and its interval.
    estimators: sample-quality metrics (Ramachandran histograms, free energies, distances).
    metrics: one flat, JSON-ready dict of metrics per generator.
    plots: the figures of the analysis stage.

Nothing here reads a run directory; energies are reduced (kT) unless a name says kJ/mol.
"""

__all__: list[str] = []
