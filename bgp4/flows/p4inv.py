"""P4Inv: invertible linear layers trained through rank-one perturbations (paper sections 3, A, B).

The layer stores a frozen matrix `A`, its inverse `A_inv` and log|det A| with the sign of det A.
Training moves only the perturbation (u, v) and the bias b: the effective map is
y = (A + u v^T) x + b, whose inverse and log-determinant follow from Sherman-Morrison and the
matrix determinant lemma in O(n^2). Every few optimizer steps the perturbation is merged into
A (again O(n^2)); `P4InvScheduler` runs those merges, the forced merges and the occasional
O(n^3) correction of the stored inverse.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any, Optional

import torch
from torch import nn
from torch.nn import functional as F

from bgp4.errors import InputError
from bgp4.flows.base import Flow

__all__ = ["MergeResult", "P4InvLinear", "P4InvScheduler"]

# Coefficients of Soleymani's seventh-order polynomial p(psi) = psi^8 - 15 psi^7 + ... + 120,
# highest power first, for Horner's scheme; V <- V p(A V) / 16 (REFERENCE section 5).
_SOLEYMANI = (-15.0, 93.0, -315.0, 651.0, -861.0, 735.0, -393.0, 120.0)


class MergeResult(str, Enum):
    """Outcome of one merge attempt on a P4Inv layer."""

    ACCEPTED = "accepted"  # within the sanity bounds, merged
    FORCED = "forced"  # outside the bounds, merged because the attempt was forced
    SKIPPED = "skipped"  # outside the bounds (or G = 0), nothing changed
    RESET = "reset"  # u or v not finite: perturbation reset, A untouched

    @property
    def merged(self) -> bool:
        """True when A, A_inv and log|det A| were updated (ACCEPTED or FORCED).

        Use this rather than the result's truth value: every member is a non-empty string.
        """
        return self in (MergeResult.ACCEPTED, MergeResult.FORCED)


class P4InvLinear(Flow):
    """Invertible affine layer y = (A + u v^T) x + b with a stored inverse and log|det|.

    Args:
        dim: feature dimension n; inputs are (..., n).
        bias: whether to learn the shift b (otherwise b = 0).
        init: "eye" (A = I) or "reverse" (A_ij = delta_{i, n-1-j}, the reversing permutation).
        c0_min: lower bound on ln|G|, G = 1 + v^T A^-1 u (appendix A's C0; default -6).
        c0_max: upper bound on ln|G| (default inf).
        c1_min: lower bound on ln|G det A|, the log|det| after a merge (C1; default -2.5).
        c1_max: upper bound on ln|G det A| (default 15.5).

    The four bounds (attributes of the same names) are the layer's one set of sanity bounds:
    `merge` accepts a perturbation only inside them, and `penalty` is zero inside them and grows
    outside, so a penalized perturbation drifts back to where merges are accepted.

    Trainable parameters: u (init 0), v (init N(0, I)), b (init 0): 3 n numbers.
    Buffers: A, A_inv (n, n), logabsdet = log|det A| and sign = sign(det A) (0-dim).

    Example:
        >>> import torch
        >>> layer = P4InvLinear(3, init="reverse")
        >>> x = torch.tensor([[1.0, 2.0, 3.0]])
        >>> layer(x)[0].tolist(), layer(x)[1].tolist()  # u = 0, b = 0 at the start: just A
        ([[3.0, 2.0, 1.0]], [0.0])
    """

    def __init__(
        self,
        dim: int,
        bias: bool = True,
        init: str = "eye",
        dtype: Optional[torch.dtype] = None,
        device: Optional[torch.device | str] = None,
        c0_min: float = -6.0,
        c0_max: float = math.inf,
        c1_min: float = -2.5,
        c1_max: float = 15.5,
    ):
        super().__init__()
        if not isinstance(dim, int) or dim < 1:
            raise InputError(f"P4InvLinear needs a positive integer dim, got {dim!r}")
        if not (c0_min <= c0_max and c1_min <= c1_max):
            raise InputError(
                f"P4InvLinear bounds need c0_min <= c0_max and c1_min <= c1_max, "
                f"got [{c0_min}, {c0_max}] and [{c1_min}, {c1_max}]"
            )
        factory: dict[str, Any] = {"dtype": dtype or torch.get_default_dtype(), "device": device}
        if init == "eye":
            A = torch.eye(dim, **factory)
            sign = 1.0
        elif init == "reverse":
            A = torch.eye(dim, **factory).flip(0)
            # The reversal is floor(n/2) transpositions: det = +1 iff n % 4 in (0, 1).
            sign = 1.0 if dim % 4 < 2 else -1.0
        else:
            raise InputError(f"P4InvLinear init must be 'eye' or 'reverse', got {init!r}")
        self.dim = dim
        self.c0_min, self.c0_max = float(c0_min), float(c0_max)
        self.c1_min, self.c1_max = float(c1_min), float(c1_max)
        self.u = nn.Parameter(torch.zeros(dim, **factory))
        self.v = nn.Parameter(torch.randn(dim, **factory))
        if bias:
            self.b = nn.Parameter(torch.zeros(dim, **factory))
        else:
            self.register_parameter("b", None)
        self.register_buffer("A", A)
        self.register_buffer("A_inv", A.clone())  # both inits are orthogonal permutations
        self.register_buffer("logabsdet", torch.zeros((), **factory))
        self.register_buffer("sign", torch.full((), sign, **factory))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, bias={self.b is not None}"

    # ----------------------------------------------------------------- the perturbed map
    def _factor(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(w, G): w = A_inv u (n,) and G = 1 + v^T A_inv u (0-dim), differentiable in u, v."""
        w = self.A_inv @ self.u
        return w, 1.0 + self.v @ w

    def log_factor(self) -> torch.Tensor:
        """ln|G|, the log|det| change the current perturbation adds to A (0-dim)."""
        return torch.log(torch.abs(self._factor()[1]))

    def slogdet(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(sign, log|det|) of the effective matrix A + u v^T, both 0-dim."""
        G = self._factor()[1]
        return self.sign * torch.sign(G), self.logabsdet + torch.log(torch.abs(G))

    def weight(self) -> torch.Tensor:
        """The effective matrix A + u v^T (n, n); O(n^2), for analysis and plots."""
        return self.A + torch.outer(self.u, self.v)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., n) -> (y (..., n), log|det| with shape x.shape[:-1])."""
        self._check_input(x)
        # One (n, n) matrix and one matmul: O(n^2) work on parameters instead of several
        # batch-sized ops (and their backward nodes) per layer.
        y = F.linear(x, torch.addr(self.A, self.u, self.v), self.b)
        logdet = self.logabsdet + self.log_factor()
        return y, logdet.expand(x.shape[:-1])

    def inverse(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """y (..., n) -> (x (..., n), log|det| of the inverse map, shape y.shape[:-1])."""
        self._check_input(y)
        w, G = self._factor()
        # Sherman-Morrison: M = (A + u v^T)^-1 = A^-1 - (A^-1 u)(v^T A^-1) / G, formed in O(n^2)
        # so that the batch sees a single matmul: x = M y - M b.
        inv = self.A_inv - torch.outer(w / G, self.v @ self.A_inv)
        x = F.linear(y, inv, None if self.b is None else -(inv @ self.b))
        logdet = -(self.logabsdet + torch.log(torch.abs(G)))
        return x, logdet.expand(y.shape[:-1])

    def _check_input(self, x: torch.Tensor) -> None:
        if x.dim() < 1 or x.shape[-1] != self.dim:
            raise InputError(f"P4InvLinear(dim={self.dim}) got input of shape {tuple(x.shape)}")

    def penalty(
        self,
        *,
        c0_min: Optional[float] = None,
        c0_max: Optional[float] = None,
        c1_min: Optional[float] = None,
        c1_max: Optional[float] = None,
    ) -> torch.Tensor:
        """Appendix A's penalty without its weight C_p (0-dim, differentiable in u and v).

        The sum of squared ReLU distances of ln|G| outside [c0_min, c0_max] and of ln|G det A|
        outside [c1_min, c1_max]; the caller multiplies it by C_p. Each bound left None is the
        layer's own merge bound of that name, so the penalty is zero exactly where `merge`
        accepts. Appendix A's penalty used [-2, 15] for both quantities, a little inside the merge
        bounds: pass c0_min=-2, c0_max=15, c1_min=-2, c1_max=15 to reproduce it.
        """
        c0 = (self.c0_min if c0_min is None else c0_min, self.c0_max if c0_max is None else c0_max)
        c1 = (self.c1_min if c1_min is None else c1_min, self.c1_max if c1_max is None else c1_max)
        log_g = self.log_factor()
        total = log_g.new_zeros(())
        for value, (low, high) in ((log_g, c0), (log_g + self.logabsdet, c1)):
            # An infinite bound adds nothing; skipping it keeps inf - inf out of the graph.
            if math.isfinite(high):
                total = total + F.relu(value - high) ** 2
            if math.isfinite(low):
                total = total + F.relu(low - value) ** 2
        return total

    # ----------------------------------------------------------------- merging and correction
    @torch.no_grad()
    def reset_perturbation(self) -> None:
        """u <- 0, v <- N(0, I) in place (keeps Parameter identity for the optimizer)."""
        self.u.zero_()
        self.v.normal_()

    @torch.no_grad()
    def merge(self, force: bool = False) -> MergeResult:
        """Fold u v^T into A, A_inv, log|det A| and sign when the update is within the bounds (or forced).

        Returns ACCEPTED (within the bounds, merged), FORCED (outside, merged because `force`),
        SKIPPED (outside and not forced, or G = 0 or not finite: nothing changed) or RESET (u or v
        not finite: perturbation reset, A untouched); `result.merged` says whether A changed.
        O(n^2). A merge with G = 0 or a non-finite G is never taken, even when forced.
        """
        w = self.A_inv @ self.u
        G = 1.0 + self.v @ w
        # One host sync for every decision below.
        finite_uv = torch.isfinite(self.u).all() & torch.isfinite(self.v).all()
        ok, g, log_det = torch.stack([finite_uv.to(G.dtype), G, self.logabsdet]).tolist()
        if not ok:
            self.reset_perturbation()
            return MergeResult.RESET
        if not math.isfinite(g) or g == 0.0:
            return MergeResult.SKIPPED
        log_g = math.log(abs(g))
        log_det_new = log_det + log_g
        sane = self.c0_min <= log_g <= self.c0_max and self.c1_min <= log_det_new <= self.c1_max
        if not sane and not force:
            return MergeResult.SKIPPED
        r = self.v @ self.A_inv  # v^T A^-1, taken before A_inv changes
        self.A.addr_(self.u, self.v)
        self.A_inv.addr_(w, r, alpha=-1.0 / g)
        self.logabsdet.add_(log_g)
        if g < 0:
            self.sign.neg_()
        self.reset_perturbation()
        return MergeResult.ACCEPTED if sane else MergeResult.FORCED

    @torch.no_grad()
    def correct(self) -> tuple[float, float]:
        """One seventh-order (Soleymani) correction of A_inv; returns (before, after), the residual
        max|A A_inv - I| of the stored inverse before the step and of the one kept after it.

        O(n^3). A step that would make the residual worse (the iteration only converges while
        the spectral radius of I - A A_inv is below 1) is rejected and A_inv kept as it was, so
        then after == before.
        """
        eye = torch.eye(self.dim, dtype=self.A.dtype, device=self.A.device)
        psi = self.A @ self.A_inv
        before = (psi - eye).abs().max()
        poly = psi - 15.0 * eye  # Horner's scheme in psi, leading coefficient 1
        for coef in _SOLEYMANI[1:]:
            poly = torch.addmm(eye, psi, poly, alpha=1.0, beta=coef)
        new_inv = (self.A_inv @ poly) / 16.0
        after = (self.A @ new_inv - eye).abs().max()
        before_f, after_f = torch.stack([before, after]).tolist()
        if math.isfinite(after_f) and after_f <= before_f:
            self.A_inv.copy_(new_inv)
            return before_f, after_f
        return before_f, before_f

    @torch.no_grad()
    def residual(self) -> float:
        """max|A A_inv - I| (O(n^3): statistics only)."""
        eye = torch.eye(self.dim, dtype=self.A.dtype, device=self.A.device)
        return float((self.A @ self.A_inv - eye).abs().max())


class P4InvScheduler:
    """Runs the P4Inv merge / force / correct schedule for every P4InvLinear in a model.

    Call `step()` after every optimizer step. Every `merge_every` steps each layer attempts a
    merge; every `force_every`-th attempt is forced and every `correct_every`-th attempt also
    corrects the stored inverses (0 disables forcing or correcting). After a merge or a
    non-finite reset the optimizer state of that layer's v is zeroed (u and b keep theirs).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: Optional[torch.optim.Optimizer] = None,
        merge_every: int = 100,
        force_every: int = 10,
        correct_every: int = 50,
    ):
        if merge_every < 1:
            raise InputError(f"P4InvScheduler merge_every must be >= 1, got {merge_every}")
        if force_every < 0 or correct_every < 0:
            raise InputError("P4InvScheduler force_every and correct_every must be >= 0 (0 disables)")
        self.layers = [m for m in model.modules() if isinstance(m, P4InvLinear)]
        self.optimizer = optimizer
        self.merge_every, self.force_every, self.correct_every = merge_every, force_every, correct_every
        self.steps = 0
        self.attempts = 0
        self.stats: dict[str, float] = {
            "accepted": 0,
            "skipped": 0,
            "forced": 0,
            "resets": 0,
            "corrections": 0,
            "max_residual": 0.0,  # worst max|A A_inv - I| seen before a correction
            "last_residual": 0.0,  # worst over layers after the latest correction
        }

    def step(self) -> None:
        """Advance one optimizer step; merge / force / correct when their turn comes."""
        self.steps += 1
        if self.steps % self.merge_every:
            return
        self.attempts += 1
        force = self.force_every > 0 and self.attempts % self.force_every == 0
        for layer in self.layers:
            result = layer.merge(force)
            self.stats["resets" if result is MergeResult.RESET else result.value] += 1
            if result is not MergeResult.SKIPPED:
                self._reset_state(layer.v)
            if result is MergeResult.RESET:
                # A non-finite u usually comes with a non-finite moment estimate.
                self._reset_state(layer.u, only_if_nonfinite=True)
        if self.correct_every > 0 and self.attempts % self.correct_every == 0:
            worst_after = 0.0
            for layer in self.layers:
                before, after = layer.correct()
                self.stats["max_residual"] = max(self.stats["max_residual"], before)
                worst_after = max(worst_after, after)
            self.stats["corrections"] += 1
            self.stats["last_residual"] = worst_after

    def _reset_state(self, param: nn.Parameter, only_if_nonfinite: bool = False) -> None:
        """Zero the optimizer state of `param` in place (moments and step counter)."""
        if self.optimizer is None or param not in self.optimizer.state:
            return
        state = self.optimizer.state[param]
        tensors = [t for t in state.values() if isinstance(t, torch.Tensor)]
        if only_if_nonfinite and all(bool(torch.isfinite(t).all()) for t in tensors):
            return
        for key, value in state.items():
            # Zeroing in place keeps dtype and device of every entry (Adam's tensor `step`
            # included), so foreach, fused and capturable code paths see a fresh state.
            if isinstance(value, torch.Tensor):
                value.zero_()
            elif isinstance(value, (int, float)):
                state[key] = type(value)(0)

    def state_dict(self) -> dict[str, Any]:
        """Counters and statistics, enough to resume the schedule exactly."""
        return {"steps": self.steps, "attempts": self.attempts, "stats": dict(self.stats)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])
        self.attempts = int(state["attempts"])
        self.stats.update(state["stats"])
