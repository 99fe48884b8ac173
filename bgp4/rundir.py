"""A run directory: effective settings, checkpoints, metrics log, final model, completion marker.

Plain files a person can read: `settings.json`, `metrics.jsonl` (one JSON object per line),
`checkpoint.pt` (torch, replaced atomically), `model.pt`, `split.npz` (train/test frame indices),
`complete.json` (written last: its presence means the run is finished).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import torch

from bgp4.errors import InputError

SETTINGS, METRICS, CHECKPOINT, MODEL, SPLIT, COMPLETE = (
    "settings.json", "metrics.jsonl", "checkpoint.pt", "model.pt", "split.npz", "complete.json",
)


class RunDirectory:
    """Files of one training run under `path`."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def complete(self) -> bool:
        return self.file(COMPLETE).exists()

    def prepare(self, settings: dict[str, Any], overwrite: bool) -> None:
        """Create the directory, or check that an existing run has the same settings."""
        if overwrite and self.path.is_dir():
            if any(self.path.iterdir()) and not self.file(SETTINGS).exists():
                raise InputError(f"{self.path} is not a bgp4 run directory; --overwrite only replaces runs")
            shutil.rmtree(self.path)
        if self.path.exists() and not self.path.is_dir():
            raise InputError(f"run directory {self.path} is a file")
        existing = self.file(SETTINGS)
        if existing.exists():
            previous = json.loads(existing.read_text())
            differ = sorted(k for k in set(previous) | set(settings) if previous.get(k) != settings.get(k))
            if differ:
                raise InputError(
                    f"{self.path} holds a run with other settings ({', '.join(differ)}); "
                    "use another --out or pass --overwrite to start again"
                )
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create run directory {self.path}: {exc.strerror}") from None
        self.write_json(SETTINGS, settings)

    def settings(self) -> dict[str, Any]:
        if not self.file(SETTINGS).exists():
            raise InputError(f"{self.path} is not a bgp4 run directory (no {SETTINGS})")
        return json.loads(self.file(SETTINGS).read_text())

    def write_json(self, name: str, payload: dict[str, Any]) -> None:
        tmp = self.file(name + ".tmp")
        tmp.write_text(json.dumps(payload, indent=1, sort_keys=True))
        os.replace(tmp, self.file(name))

    def save_torch(self, name: str, payload: Any) -> None:
        """torch.save to a temporary name, then rename: a kill never leaves half a file."""
        tmp = self.file(name + ".tmp")
        torch.save(payload, tmp)
        os.replace(tmp, self.file(name))

    def load_torch(self, name: str, map_location: str | torch.device = "cpu") -> Any:
        return torch.load(self.file(name), map_location=map_location, weights_only=False)

    def log(self, record: dict[str, Any]) -> None:
        with open(self.file(METRICS), "a") as f:
            f.write(json.dumps(record) + "\n")

    def records(self) -> Iterator[dict[str, Any]]:
        path = self.file(METRICS)
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    yield json.loads(line)

    def truncate_log(self, step: int) -> None:
        """Drop records written after global step `step` (they are redone after a resume)."""
        kept = [r for r in self.records() if r.get("global_step", 0) <= step]
        tmp = self.file(METRICS + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        os.replace(tmp, self.file(METRICS))
