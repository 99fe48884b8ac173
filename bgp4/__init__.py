"""bgp4: Boltzmann generators for peptides (alanine dipeptide and beyond) with P4Inv invertible linear layers."""

__all__ = ["__version__"]

__version__ = "0.1.0"
