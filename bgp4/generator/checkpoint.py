"""A run's checkpoint: every piece of training state in one file, so that a resumed run equals an
unbroken one.

`checkpoint.pt` holds the model, the loop's counters, optimizer, P4Inv scheduler and metrics
interval (with `keep_best`, the best weights of the likelihood phase so far), the energy phase's
objective (FAB: its replay buffer, step sizes and streams), and the
random streams: the private stream of torch's global generators (initialization and P4Inv's
redraws), the batch stream (runs with MD data) and the energy phase's sample stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bgp4.generator.rundir import CHECKPOINT

if TYPE_CHECKING:
    import torch

    from bgp4._rng import PrivateRNG
    from bgp4.generator.loop import TrainingLoop
    from bgp4.generator.model import BoltzmannGenerator
    from bgp4.generator.rundir import RunDirectory
    from bgp4.generator.training_data import TrainingData

__all__ = ["Checkpoint"]


class Checkpoint:
    """Saves and restores the training state of one run's parts in its `checkpoint.pt`.

    It remembers the file as it last wrote it: a sweep's worker keeps a Trainer between the parts
    of a run (`bgp4.sweep.plugins.TrainerCache`), and when the file is still the one it wrote, the
    state in memory is the checkpoint's and reloading it is skipped.
    """

    def __init__(
        self,
        run: RunDirectory,
        bg: BoltzmannGenerator,
        rng: PrivateRNG,
        data: TrainingData | None,
        loop: TrainingLoop,
        device: torch.device,
    ):
        self.run, self.bg, self.rng, self.data, self.loop, self.device = run, bg, rng, data, loop, device
        self._saved: tuple[int, ...] | None = None  # the file's signature as this object last wrote it

    def save(self) -> None:
        """Write the whole training state (atomically)."""
        state = {
            **self.loop.state_dict(),
            "model": self.bg.state_dict(),
            "rng": self.rng.state_dict(),
            **(self.data.state_dict() if self.data is not None else {}),
        }
        self.run.save_torch(CHECKPOINT, state)
        self._saved = self.run.signature(CHECKPOINT)

    def moved_on(self) -> None:
        """The state in memory moves on from the file (a step is taken, or may have been)."""
        self._saved = None

    def restore(self) -> bool:
        """Load the checkpoint if there is one (unless this object wrote it and the state has not
        moved on since) and drop metrics records after its step; returns whether there was one."""
        if not self.run.file(CHECKPOINT).exists():
            return False
        if self._saved is not None and self._saved == self.run.signature(CHECKPOINT):
            self.run.truncate_log(self.loop.step)  # records of a part another worker began after it
            return True
        state = self.run.load_torch(CHECKPOINT, map_location=self.device)
        self.bg.load_state_dict(state["model"])
        self.loop.load_state_dict(state)
        self.rng.load_state_dict(state["rng"] if "rng" in state else {"cpu": state["torch_rng"]})  # or older
        if self.data is not None:
            self.data.load_state_dict(state)
        self.run.truncate_log(self.loop.step)
        return True
