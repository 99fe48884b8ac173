"""Helpers of the replica-exchange tests (test_remd_*.py): the tiny run's settings."""

from __future__ import annotations

from bgp4.simulation.md import MDSettings

TINY = MDSettings(
    frames=20,
    temperature=300.0,
    replica_exchange="300:600:3",
    save_every=20,
    equilibration_ps=0.2,
    constraints="none",
    seed=3,
)
