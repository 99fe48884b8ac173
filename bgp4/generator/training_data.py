"""A run's frames as training sees them: the train/test split, flow coordinates and batches.

The split and the held-out frames that are scored follow from the seed alone, and batches are
drawn from a generator of their own (seed + 1) whose state the checkpoint keeps, so that a resumed
run draws the same batches as an unbroken one.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np
import torch

from bgp4.errors import InputError
from bgp4.simulation.atoms import rotor_hydrogens
from bgp4.simulation.data import held_out_count, relabel_rotors, train_test_split

if TYPE_CHECKING:
    from bgp4.generator.model import BoltzmannGenerator
    from bgp4.settings import TrainSettings
    from bgp4.simulation.molecule import Molecule

__all__ = ["TEST_FRAMES", "TrainingData", "check_frame_count"]

TEST_FRAMES = 10_000  # held-out frames scored at each evaluation
MAP_CHUNK = 8192  # frames mapped to flow coordinates at once


def check_frame_count(n_frames: int, settings: TrainSettings, source: str) -> None:
    """InputError when `n_frames` frames (of `source`, a file or what will make it) leave no
    held-out frame under the settings' test fraction, or fewer training frames than one batch."""
    n_test = held_out_count(n_frames, settings.test_fraction)
    if n_test < 1:
        raise InputError(
            f"test_fraction (--test-fraction) {settings.test_fraction} leaves no test frames out of "
            f"{n_frames} of {source}"
        )
    if n_frames - n_test < settings.batch:
        raise InputError(
            f"{source} has {n_frames - n_test} training frames, fewer than one batch of {settings.batch} (--batch)"
        )


class TrainingData:
    """The training and held-out frames of one run, split by the seed.

    Built in two steps, since the generator's coordinate transform is fitted to the training
    frames: `TrainingData(xyz, settings, molecule)` splits, then `map(bg)` maps the frames to the
    generator's flow coordinates. They are mapped once (the transform is fixed), unless `augment`
    relabels each batch's interchangeable hydrogens first: then training frames stay Cartesian
    (`train_xyz`) and each batch is mapped when drawn.

    Attributes: train_idx, test_idx (sorted frame indices), train_frames (n_train, n_atoms, 3) nm,
    rotors (T, 3) atom triples relabelled by augment (none without it), batch_gen (the batch
    stream), and after `map`: train_y (flow coordinates and log|dy/dx| of the training frames,
    None with augment), train_xyz (the training frames with augment, else None) and test_y (of at
    most TEST_FRAMES held-out frames).
    """

    def __init__(self, xyz: np.ndarray, settings: TrainSettings, molecule: Molecule):
        self.train_idx, self.test_idx = train_test_split(len(xyz), settings.test_fraction, settings.seed)
        self.train_frames = xyz[self.train_idx]
        self.n_train = int(self.train_idx.size)
        self.augment = settings.augment
        triples = rotor_hydrogens(molecule) if settings.augment else []
        self.rotors = np.array(triples, dtype=np.int64).reshape(-1, 3)
        test_pick = np.random.default_rng(settings.seed).permutation(self.test_idx.size)[:TEST_FRAMES]
        self._test_frames = xyz[self.test_idx[np.sort(test_pick)]]
        self.batch_gen = torch.Generator().manual_seed(settings.seed + 1)
        self.bg: BoltzmannGenerator | None = None
        self.train_xyz: np.ndarray | None = None
        self.train_y: tuple[torch.Tensor, torch.Tensor] | None = None
        self.test_y: tuple[torch.Tensor, torch.Tensor] | None = None

    def map(self, bg: BoltzmannGenerator) -> None:
        """Map the frames to `bg`'s flow coordinates (on its device)."""
        self.bg = bg
        self._mapped_by = _fitted(bg)
        self.train_xyz = self.train_frames if self.augment else None
        self.train_y = None if self.augment else self.flow_coordinates(self.train_frames)
        self.test_y = self.flow_coordinates(self._test_frames)

    def remap_if_refitted(self) -> bool:
        """Map the frames again if the generator's transform has changed since `map` (a checkpoint
        loaded over the fresh fit, which an older bgp4 fitted otherwise); returns whether it did."""
        now = _fitted(self.bg)
        if now.keys() == self._mapped_by.keys() and all(torch.equal(now[k], self._mapped_by[k]) for k in now):
            return False
        print("the loaded model's coordinate transform differs from a fit to these frames: it is kept", file=sys.stderr)
        self.map(self.bg)
        return True

    def flow_coordinates(self, xyz: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Frames (n, n_atoms, 3) nm -> flow coordinates (n, dims) and log|dy/dx| (n,) on the device."""
        with torch.no_grad():
            parts = [
                self.bg.flow_coordinates(torch.as_tensor(c, device=self.bg.device))
                for c in np.array_split(xyz, max(1, len(xyz) // MAP_CHUNK))
            ]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def draw(self, n: int) -> torch.Tensor:
        """Indices (n,) of a batch of training frames, drawn from the batch stream."""
        return torch.randint(self.n_train, (n,), generator=self.batch_gen)

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Flow coordinates and log|dy/dx| of the training frames `idx` (relabelled at random with augment)."""
        if self.train_xyz is None:
            idx = idx.to(self.bg.device)
            return self.train_y[0][idx], self.train_y[1][idx]
        shifts = torch.randint(3, (len(idx), len(self.rotors)), generator=self.batch_gen).numpy()
        xyz = relabel_rotors(self.train_xyz[idx.numpy()], self.rotors, shifts)
        with torch.no_grad():
            return self.bg.flow_coordinates(torch.as_tensor(xyz, device=self.bg.device))

    def first(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `n` training frames as a batch, drawing nothing from the batch stream (a
        warm-up batch: drawing here would shift the stream on resume)."""
        if self.train_xyz is None:
            idx = torch.arange(n, device=self.bg.device)  # a fresh tensor, like a real batch
            return self.train_y[0][idx], self.train_y[1][idx]
        return self.flow_coordinates(self.train_xyz[:n])  # frames as simulated

    def test_batches(self, size: int = 4096):
        """The held-out frames' flow coordinates and log|dy/dx| in batches of `size`."""
        return zip(self.test_y[0].split(size), self.test_y[1].split(size))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The batch stream's state (the checkpoint's "batch_rng")."""
        return {"batch_rng": self.batch_gen.get_state()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.batch_gen.set_state(state["batch_rng"].cpu())


def _fitted(bg: BoltzmannGenerator) -> dict[str, torch.Tensor]:
    """A copy of the fitted buffers of `bg`'s coordinate transform (what maps frames to flow coordinates)."""
    return {k: v.detach().clone() for k, v in bg.transform.state_dict().items()}
