"""Take a subset of a bgp4 data file's frames: N frames, every K-th from frame I.

    python run/scripts/subset_data.py OUT.h5 IN.h5 --frames 50000 [--stride 5] [--start 0]

Used to ask whether the number of training frames alone explains a generator's reverse ESS: the
600 K recipe that reaches 0.80 on 1,000,000 frames, trained on 50,000 of them spaced as the
300 K replica-exchange data are (run/results/benchmark-300K/ml-50000-frames.md, "How many frames").

The subset is a plain bgp4 data file with the input's settings, `frames` set to N, `save_every`
multiplied by the stride (so frames x save_every is still the MD behind them) and `subset_of`
(the input's path, start and stride) added. With `--replicas` runs, the input holds its replicas
one after another; a subset that stays inside one of them is one trajectory.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from bgp4.simulation.data import load_trajectory, write_trajectory

__all__ = ["subset_settings", "frame_indices", "main"]


def frame_indices(n_frames: int, frames: int, stride: int, start: int) -> np.ndarray:
    """Indices start, start + stride, ... (`frames` of them); SystemExit if they pass the end."""
    if frames < 1 or stride < 1 or start < 0:
        raise SystemExit("--frames and --stride must be >= 1 and --start >= 0")
    last = start + (frames - 1) * stride
    if last >= n_frames:
        raise SystemExit(f"the subset needs frame {last}, but the input has {n_frames} frames")
    return np.arange(start, last + 1, stride)


def subset_settings(settings: dict, path: Path, frames: int, stride: int, start: int) -> dict:
    """The input's settings for a subset of `frames` frames, every `stride`-th from `start`."""
    out = dict(settings)
    out["frames"] = int(frames)
    if out.get("save_every"):
        out["save_every"] = int(out["save_every"]) * stride
    out["subset_of"] = {"path": str(path), "start": int(start), "stride": int(stride)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("input", type=Path)
    parser.add_argument("--frames", type=int, required=True, help="frames in the subset")
    parser.add_argument("--stride", type=int, default=1, help="take every K-th frame")
    parser.add_argument("--start", type=int, default=0, help="first frame (0-based)")
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"{args.out} exists; choose another name")
    data = load_trajectory(args.input)
    idx = frame_indices(data.n_frames, args.frames, args.stride, args.start)
    settings = subset_settings(data.settings, args.input, args.frames, args.stride, args.start)
    chunk = {"coordinates": data.xyz[idx], "potentialEnergy": data.energies[idx].astype(np.float32)}
    write_trajectory(args.out, data.topology, [chunk], settings)
    print(f"{args.out}: {len(idx)} frames of {data.n_frames} (from {args.start}, every {args.stride})")


if __name__ == "__main__":
    main()
