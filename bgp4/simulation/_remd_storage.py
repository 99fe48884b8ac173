"""openmmtools' multistate storage for bgp4's replica exchange, without the per-iteration rewrite
of unchanged MCMC moves.

openmmtools' sampler stores its MCMC moves after every iteration (they "can store internal
statistics"), as YAML text in the netCDF file. bgp4's moves (`SeededLangevinMove`) hold only their
settings, so every one of those writes stores the same text again; at 100-step iterations (a frame
every 0.1 ps, `--velocity-refresh exchange`) the YAML serialization was the largest cost after the
MD itself (`python -m cProfile -m bgp4.cli simulate ... --save-every 100`). `SegmentReporter` writes
the moves when their serialization differs from the last one written, so the file holds the same
moves as before and `ParallelTemperingSampler.from_storage` reads them as before.

A module of its own because it subclasses an openmmtools class: importing it imports openmmtools
(about a second), which `bgp4.simulation.remd` imports only when a run starts.
"""

from __future__ import annotations

from openmmtools.multistate import MultiStateReporter
from openmmtools.utils import serialize

__all__ = ["SegmentReporter"]


class SegmentReporter(MultiStateReporter):
    """openmmtools' `MultiStateReporter` that skips writing MCMC moves identical to those it last
    wrote (each reporter writes them at least once: a resumed run's storage gets them again)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._moves_written: list[dict] | None = None

    def write_mcmc_moves(self, mcmc_moves) -> None:
        serialized = [serialize(move) for move in mcmc_moves]
        if serialized == self._moves_written:
            return
        super().write_mcmc_moves(mcmc_moves)
        self._moves_written = serialized
