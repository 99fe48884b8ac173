"""psi in the umbrella windows of run/scripts/umbrella_phi.py whose phi centres lie in 0-180 degrees:
the share of frames with psi in (-120, 0) degrees in each window's first 250 ps and in all of it,
and how often psi crosses into or out of that range (a slow psi shows as few crossings; counted on
frames 1 ps apart, so a lower bound).

    python psi_windows.py WORK          # WORK: umbrella_phi.py's --out folder (72 windows)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

FIRST = 250  # frames (ps) of the short estimate


def main(work: Path) -> None:
    windows = json.loads((work / "umbrella.json").read_text())["windows"]
    print("centre_deg  share_first250  share_all  crossings  median_phi_deg")
    for i in range(windows):
        centre = -180 + 360 * i / windows
        path = work / f"window-{i:03d}.npz"
        if not 0 <= centre <= 180 or not path.exists():
            continue
        window = np.load(path)
        phi, psi = np.degrees(window["phi"]), np.degrees(window["psi"])
        side = (psi > -120) & (psi < 0)
        crossings = int(np.count_nonzero(np.diff(side.astype(int))))
        shares = f"{side[:FIRST].mean():14.3f}  {side.mean():9.3f}"
        print(f"{centre:10.1f}  {shares}  {crossings:9d}  {np.median(phi):14.1f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
