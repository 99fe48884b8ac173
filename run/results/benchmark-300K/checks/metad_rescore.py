"""P(phi > 0) of finished run/scripts/metad_phi.py walks from their bias files, with the script's
current reading of OpenMM's grid (the walks' own JSON files were written before `p_phi_positive`
counted the grid's repeated last point once: 0.0197 and 0.0207 then).

    python metad_rescore.py WORK [...]      # metad_phi.py --out folders
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from bgp4.simulation.molecule import kT

SCRIPT = Path(__file__).resolve().parents[4] / "run" / "scripts" / "metad_phi.py"


def walk_bias(work: Path) -> tuple[dict, np.ndarray]:
    """A finished walk's settings record and final bias (n_psi, n_phi), kJ/mol: every start's files."""
    record = json.loads((work / "metad.json").read_text())
    return record, sum(np.load(f) for f in sorted((work / "bias").glob("bias_*.npy")))


def main(works: list[Path]) -> None:
    spec = importlib.util.spec_from_file_location("metad_phi", SCRIPT)
    metad = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(metad)
    values = []
    for work in works:
        record, bias = walk_bias(work)
        factor = record["bias_factor"] / (record["bias_factor"] - 1.0)
        values.append(metad.p_phi_positive(-factor * bias, kT(record["data"]["temperature"])))
        print(f"{work}: seed {record['seed']}, P(phi > 0) {values[-1]:.5f}")
    print(f"mean of {len(values)}: {np.mean(values):.5f}")


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])
