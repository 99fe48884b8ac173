"""`python -m bgp4.cli`: the same as the `bgp4` console script."""

import sys

from bgp4.cli import main

__all__ = []

if __name__ == "__main__":  # pytest's --doctest-modules imports this module too
    sys.exit(main())
