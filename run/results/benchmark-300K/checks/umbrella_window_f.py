"""The windows' MBAR free energies (kT, window at -180 degrees = 0) of umbrella walks side by side:
where two walks of run/scripts/umbrella_phi.py part, along phi.

    python umbrella_window_f.py WORK_A WORK_B [...]   # umbrella_phi.py --out folders, k = 400
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from bgp4.simulation.molecule import kT

SCRIPT = Path(__file__).resolve().parents[4] / "run" / "scripts" / "umbrella_phi.py"


def _umbrella():
    spec = importlib.util.spec_from_file_location("umbrella_phi", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(works: list[Path]) -> None:
    umbrella, profiles = _umbrella(), []
    for work in works:
        record = json.loads((work / "umbrella.json").read_text())
        samples = [np.load(work / f"window-{i:03d}.npz")["phi"] for i in range(record["windows"])]
        mbar, _ = umbrella.windows_mbar(samples, record["k"], kT(record["data"]["temperature"]))
        profiles.append(mbar.f_k - mbar.f_k[0])
    print("centre_deg  " + "  ".join(f"f_{w.name}" for w in works))
    windows = len(profiles[0])
    for i, row in enumerate(np.array(profiles).T):
        print(f"{-180 + 360 * i / windows:10.0f}  " + "  ".join(f"{f:8.2f}" for f in row))


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])
