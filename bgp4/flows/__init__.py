"""Normalizing-flow layers: the Flow contract, the mixed coordinate transform, affine and spline couplings, P4Inv.

The coordinate transform is fitted to MD frames (`MixedCoordinateTransform.fit`) or, without
data, to the molecule's minimized structure with force-field widths (`structure_fit`).
"""

from bgp4.flows.base import Flow, SequentialFlow, SubsetFlow
from bgp4.flows.coordinates import MixedCoordinateTransform
from bgp4.flows.coupling import AffineCoupling, Swap
from bgp4.flows.p4inv import P4InvLinear, P4InvScheduler
from bgp4.flows.splines import CircularShift, MaskedCoupling, RQSpline

__all__ = [
    "Flow",
    "SequentialFlow",
    "SubsetFlow",
    "CircularShift",
    "MaskedCoupling",
    "RQSpline",
    "P4InvLinear",
    "P4InvScheduler",
    "MixedCoordinateTransform",
    "AffineCoupling",
    "Swap",
]
