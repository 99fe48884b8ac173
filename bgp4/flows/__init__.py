"""Normalizing-flow layers: the Flow contract, the mixed coordinate transform, couplings, P4Inv."""
from bgp4.flows.base import Flow, SequentialFlow
from bgp4.flows.p4inv import P4InvLinear, P4InvScheduler
from bgp4.flows.coordinates import MixedCoordinateTransform
from bgp4.flows.coupling import AffineCoupling, Swap

__all__ = ["Flow", "SequentialFlow", "P4InvLinear", "P4InvScheduler", "MixedCoordinateTransform", "AffineCoupling", "Swap"]
