"""A private stream of torch's default random generators, for code that cannot take a Generator.

Module initialization (nn.Linear) and P4Inv's redraw of v after a merge draw from torch's global
generators. Training runs them inside `with rng:` so that a run is reproducible from its seed
without reseeding (and thereby changing) the caller's global generators.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

__all__ = ["PrivateRNG"]


class PrivateRNG:
    """The state of the CPU generator (and of one CUDA device's, for a CUDA `device`), seeded like
    `torch.manual_seed(seed)`, swapped in by `with rng:` and out again on exit."""

    def __init__(self, seed: int, device: torch.device | str = "cpu"):
        device = torch.device(device)
        self.cuda: Optional[int] = None
        if device.type == "cuda":
            self.cuda = device.index if device.index is not None else torch.cuda.current_device()
        self.cpu_state = torch.Generator().manual_seed(seed).get_state()
        self.cuda_state = None
        if self.cuda is not None:
            self.cuda_state = torch.Generator(device=f"cuda:{self.cuda}").manual_seed(seed).get_state()
        self._outer: list[Any] = []

    def __enter__(self) -> PrivateRNG:
        self._outer.append((torch.get_rng_state(), self._get_cuda()))
        torch.set_rng_state(self.cpu_state)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda_state, self.cuda)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cpu_state, self.cuda_state = torch.get_rng_state(), self._get_cuda()
        cpu, cuda = self._outer.pop()
        torch.set_rng_state(cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(cuda, self.cuda)

    def _get_cuda(self) -> Optional[torch.Tensor]:
        return torch.cuda.get_rng_state(self.cuda) if self.cuda is not None else None

    def state_dict(self) -> dict[str, Optional[torch.Tensor]]:
        return {"cpu": self.cpu_state, "cuda": self.cuda_state}

    def load_state_dict(self, state: dict[str, Optional[torch.Tensor]]) -> None:
        self.cpu_state = state["cpu"].cpu()
        if self.cuda is not None and state.get("cuda") is not None:
            self.cuda_state = state["cuda"].cpu()
