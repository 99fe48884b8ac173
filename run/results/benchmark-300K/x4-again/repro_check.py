"""Are the first 80,000 frames of session 49's dense seed-N run those of session 48's 80,000-frame run
of the same seed? (`bgp4 simulate` promises an uninterrupted run is reproducible bit for bit.)"""

import sys

import numpy as np

from bgp4.simulation.data import load_trajectory

for seed in sys.argv[1:]:
    old = load_trajectory(f"/root/s48/data/ala2-300K-remd-dense-half-s{seed}.h5")
    new = load_trajectory(f"/root/s49/data/ala2-300K-remd-dense-s{seed}.h5")
    n = old.n_frames
    same_xyz = np.array_equal(old.xyz, new.xyz[:n])
    same_u = np.array_equal(old.energies, new.energies[:n])
    dx = float(np.abs(old.xyz - new.xyz[:n]).max())
    first = int(np.argmax(np.any(old.xyz != new.xyz[:n], axis=(1, 2)))) if not same_xyz else None
    print(
        f"seed {seed}: {n} vs {new.n_frames} frames; positions equal {same_xyz} (max |dx| {dx:.3g} nm, "
        f"first differing frame {first}); energies equal {same_u}"
    )
