"""Boltzmann generators: building them, training, sampling and AIS refinement.

Modules:
    model: the generator kinds built from `bgp4.flows` and a molecule.
    losses: training objectives (likelihood, the energy phase, the P4Inv penalty).
    train: the training stage (resumable run directories).
    rundir: what a run directory holds.
    sample: drawing samples with energies and importance weights.
    refine, targets: annealed importance sampling in the latent space.
"""

__all__: list[str] = []
