"""Normalizing-flow layers: the Flow contract, the mixed coordinate transform, couplings, P4Inv."""
from bgp4.flows.base import Flow, SequentialFlow

__all__ = ["Flow", "SequentialFlow"]
