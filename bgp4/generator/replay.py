"""FAB's prioritized replay buffer: AIS samples with their log weights, drawn in proportion to them.

Each entry is a sample as the likelihood sees it (flow coordinates y and log|dy/dx| of its
positions), its AIS log weight towards p^2/q and log q_old, the flow's log density when that weight
was last brought up to date. The weight towards p^2/q of the current flow q is

    log w + log q_old(x) - log q(x)

(the target p^2/q changes with q by exactly that factor, and AIS's proposal is fixed once drawn),
so a weight need only be brought up to date when its sample is used: `adjust` adds
log q_old - log q and stores log q as the new log q_old. Stale entries are drawn with their last
weights, as in FAB (Midgley et al. 2023). The ring keeps the newest `capacity` samples.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["ReplayBuffer"]


class ReplayBuffer:
    """A ring of `capacity` samples: y (capacity, dim), logdet (capacity,), log_w and log_q_old
    (capacity,) float64; `size` entries filled, the next written at `cursor`. Draws need at
    least `min_size` entries (`ready`)."""

    def __init__(self, capacity: int, dim: int, min_size: int, device: torch.device | str = "cpu"):
        if not 1 <= min_size <= capacity:
            raise ValueError(f"min_size must be in 1..capacity ({capacity}), got {min_size}")
        self.capacity, self.min_size = int(capacity), int(min_size)
        self.y = torch.zeros(capacity, dim, device=device)
        self.logdet = torch.zeros(capacity, device=device)
        self.log_w = torch.full((capacity,), -torch.inf, dtype=torch.float64, device=device)
        self.log_q_old = torch.zeros(capacity, dtype=torch.float64, device=device)
        self.size = 0
        self.cursor = 0
        self.added = 0  # samples ever added (the ring overwrites the oldest)

    @property
    def ready(self) -> bool:
        """Whether the buffer holds enough samples to draw batches from."""
        return self.size >= self.min_size

    def add(self, y: torch.Tensor, logdet: torch.Tensor, log_w: torch.Tensor, log_q: torch.Tensor) -> None:
        """Append samples (n, dim), (n,), (n,), (n,), overwriting the oldest when full.

        Samples of zero weight (log w = -inf, nan) are never drawn: they are left out.
        """
        keep = torch.isfinite(log_w) & torch.isfinite(log_q)
        y, logdet, log_w, log_q = y[keep], logdet[keep], log_w[keep], log_q[keep]
        n = len(y)
        if n > self.capacity:  # only the newest fit
            y, logdet, log_w, log_q = (
                y[-self.capacity :],
                logdet[-self.capacity :],
                log_w[-self.capacity :],
                log_q[-self.capacity :],
            )
            n = self.capacity
        rows = (self.cursor + torch.arange(n, device=self.y.device)) % self.capacity
        self.y[rows] = y.detach().to(self.y)
        self.logdet[rows] = logdet.detach().to(self.logdet)
        self.log_w[rows] = log_w.detach().to(self.log_w)
        self.log_q_old[rows] = log_q.detach().to(self.log_q_old)
        self.cursor = int((self.cursor + n) % self.capacity)
        self.size = min(self.capacity, self.size + n)
        self.added += n

    def draw(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Indices (n,) of distinct entries drawn with probabilities proportional to their weights
        (successively, without replacement: the Gumbel top-k trick), from `generator`."""
        if not self.ready or n > self.size:
            raise ValueError(f"the buffer holds {self.size} samples: too few to draw {n}")
        uniform = torch.rand(self.size, generator=generator, dtype=torch.float64).to(self.log_w.device)
        gumbel = -torch.log(-torch.log(uniform.clamp_min(1e-300)))
        return torch.topk(self.log_w[: self.size] + gumbel, n).indices

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(y, logdet, log_q_old) of the entries `idx`."""
        return self.y[idx], self.logdet[idx], self.log_q_old[idx]

    def adjust(self, idx: torch.Tensor, log_q: torch.Tensor) -> None:
        """Bring the weights of entries `idx` up to date with the flow's log q (n,) of their samples:
        log w += log q_old - log q, log q_old = log q (entries whose log q is not finite keep theirs)."""
        log_q = log_q.detach().to(self.log_q_old)
        ok = torch.isfinite(log_q)
        idx, log_q = idx[ok], log_q[ok]
        self.log_w[idx] += self.log_q_old[idx] - log_q
        self.log_q_old[idx] = log_q

    def current_log_w(self, log_q: torch.Tensor) -> torch.Tensor:
        """The log weights (size,) of the stored samples towards p^2/q for the flow whose log
        density of them is `log_q` (size,): log w + log q_old - log q."""
        return self.log_w[: self.size] + self.log_q_old[: self.size] - log_q.to(self.log_w)

    def state_dict(self) -> dict[str, Any]:
        """The filled part and the counters (a checkpoint's "replay" entry)."""
        n = self.size
        return {
            "y": self.y[:n].clone(),
            "logdet": self.logdet[:n].clone(),
            "log_w": self.log_w[:n].clone(),
            "log_q_old": self.log_q_old[:n].clone(),
            "cursor": self.cursor,
            "added": self.added,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = len(state["log_w"])
        if n > self.capacity:
            raise ValueError(f"a saved buffer of {n} samples does not fit a capacity of {self.capacity}")
        for name in ("y", "logdet", "log_w", "log_q_old"):
            getattr(self, name)[:n] = state[name].to(getattr(self, name))
        self.log_w[n:] = -torch.inf
        self.size, self.cursor, self.added = n, int(state["cursor"]), int(state["added"])
