"""Boltzmann generators: building them, training, sampling and AIS refinement.

Modules:
    model: the generator kinds built from `bgp4.flows` and a molecule.
    losses: loss terms (likelihood, reverse KL, FAB's alpha = 2 loss, the P4Inv penalty).
    objectives: what the energy phase trains (mixed, kl, fab), one class each; fab (AIS
        towards p^2/q on refine's moves) and replay (FAB's prioritized replay buffer) serve fab.
    train: the training stage (resumable run directories): a thin Trainer over
        training_data (the split, flow coordinates and batches), loop (optimizer, P4Inv
        schedule, learning rate, one step, the metrics records) and checkpoint (the whole
        training state in one file, so that a resumed run equals an unbroken one).
    rundir: what a run directory holds.
    sample: drawing samples with energies and importance weights.
    refine, targets: annealed importance sampling in the latent space, with chains (the
        annealed samples and where a killed refinement resumes from) and moves (HMC/MALA,
        independence Metropolis, resampling).
    rows: large batches through the flow a slice of rows at a time (bounded memory).
"""

__all__: list[str] = []
