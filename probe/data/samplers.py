"""Pair samplers over factor class indices (SlowVAE / PCL training pairs).

``LaplaceTransitionSampler`` is the "LAP" transition of Klindt et al. 2021 as implemented in the
reference code (``bethgelab/slow_disentanglement`` ``scripts/dataset.py:TupleLoader.truncated_laplace``):

* every non-frozen factor ``k`` of size ``n_k`` is redrawn independently from a discrete Laplace over its
  class indices, ``p(v | s) ∝ exp(-|v - s| / b_k)`` for ``v ∈ {0..n_k-1}``, scale ``b_k = ln(n_k) / r``,
  truncated to the valid range and renormalised: **no wrap-around**, also for cyclic factors such as
  orientation (reference behaviour);
* frozen ("categorical") factors are copied unchanged (the reference freezes ``shape`` in dSprites and
  Shapes3D);
* if nothing changed, one eligible factor is chosen uniformly and redrawn from the same truncated
  Laplace with the current value excluded, so at least one factor always changes;
* the rate ``r`` is either fixed or drawn per pair from ``U(lo, hi)`` (reference ``rate=-1`` means
  ``U(1, 10)``, one draw per pair shared by all factors).

Deviation from the reference (only reachable with size-1 factors, which the reference datasets do not
have): factors of size 1 cannot change and are never eligible for the "at least one change" redraw (the
reference would divide by zero there: ``ln(1) = 0``).

Everything is vectorised over the batch; randomness comes only from the ``torch.Generator`` passed in.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from probe.errors import UserError


def truncated_laplace_logits(start: torch.Tensor, sizes: torch.Tensor, rate: torch.Tensor, max_size: int) -> torch.Tensor:
    """Unnormalised log-pmf [..., max_size] of the truncated discrete Laplace over ``0..size-1``.

    ``start``, ``sizes`` and ``rate`` broadcast against each other; values ``v >= size`` get ``-inf``.
    Factors of size 1 put all mass on 0 (scale ``ln 1 = 0`` is replaced by 1: the pmf is a point mass anyway).
    """
    values = torch.arange(max_size, device=start.device, dtype=torch.float64)
    sizes_f = sizes.to(torch.float64)
    scale = torch.log(sizes_f).clamp_min(1e-12) / rate.to(torch.float64)
    logits = -(values - start.to(torch.float64).unsqueeze(-1)).abs() / scale.unsqueeze(-1)
    return logits.masked_fill(values >= sizes_f.unsqueeze(-1), float("-inf"))


def truncated_laplace_pmf(start: int, size: int, rate: float) -> torch.Tensor:
    """Exact pmf [size] of one factor's transition (float64); used by tests and docs."""
    logits = truncated_laplace_logits(torch.tensor(start), torch.tensor(size), torch.tensor(float(rate)), size)
    return torch.softmax(logits, dim=-1)


class LaplaceTransitionSampler:
    """Second-frame factors for first-frame factors: ``sample_next(factors [B, K], generator) -> [B, K]``.

    ``frozen``: factor indices copied unchanged. ``rate``: a positive number (fixed rate) or a pair
    ``(lo, hi)`` for a per-pair rate ``U(lo, hi)``.
    """

    def __init__(self, factor_sizes: Sequence[int], frozen: Sequence[int] = (), rate: float | Sequence[float] = (1.0, 10.0)):
        self.factor_sizes = [int(s) for s in factor_sizes]
        k = len(self.factor_sizes)
        if k == 0 or any(s < 1 for s in self.factor_sizes):
            raise UserError(f"pair sampler: factor_sizes must be positive ints, got {list(factor_sizes)!r}")
        frozen = sorted({int(f) for f in frozen})
        if any(f < 0 or f >= k for f in frozen):
            raise UserError(f"pair sampler: frozen factor indices {frozen} out of range for {k} factors")
        self.frozen = frozen
        if isinstance(rate, (int, float)):
            if not (rate > 0 and math.isfinite(rate)):
                raise UserError(f"pair sampler: transition rate must be a positive number, got {rate!r}")
            self.rate: float | tuple[float, float] = float(rate)
        else:
            lo, hi = (float(r) for r in rate)
            if not (0 < lo <= hi and math.isfinite(hi)):
                raise UserError(f"pair sampler: transition rate range must satisfy 0 < lo <= hi, got {list(rate)!r}")
            self.rate = (lo, hi)
        movable = [s > 1 and i not in frozen for i, s in enumerate(self.factor_sizes)]
        if not any(movable):
            raise UserError("pair sampler: no factor can change (all are frozen or have a single value); "
                            "unfreeze at least one factor with more than one value")
        self._movable = movable
        self.max_size = max(self.factor_sizes)

    def __repr__(self) -> str:
        return f"LaplaceTransitionSampler(sizes={self.factor_sizes}, frozen={self.frozen}, rate={self.rate})"

    def config(self) -> dict:
        rate = list(self.rate) if isinstance(self.rate, tuple) else self.rate
        return {"kind": "laplace", "factor_sizes": self.factor_sizes, "frozen": self.frozen, "rate": rate}

    def _draw_rate(self, batch: int, generator: torch.Generator, device) -> torch.Tensor:
        if isinstance(self.rate, float):
            return torch.full((batch, 1), self.rate, dtype=torch.float64, device=device)
        lo, hi = self.rate
        u = torch.rand((batch, 1), generator=generator, device=device, dtype=torch.float64)
        return lo + (hi - lo) * u

    def sample_next(self, factors: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        factors = torch.as_tensor(factors)
        if factors.ndim != 2 or factors.shape[1] != len(self.factor_sizes):
            raise ValueError(f"expected factors [B, {len(self.factor_sizes)}], got {tuple(factors.shape)}")
        device = factors.device
        b, k = factors.shape
        sizes = torch.tensor(self.factor_sizes, device=device)
        movable = torch.tensor(self._movable, device=device)
        rate = self._draw_rate(b, generator, device)                                  # [B, 1]

        logits = truncated_laplace_logits(factors, sizes.expand(b, k), rate.expand(b, k), self.max_size)  # [B, K, M]
        probs = torch.softmax(logits, dim=-1).reshape(b * k, self.max_size)
        proposal = torch.multinomial(probs, 1, generator=generator).reshape(b, k)
        nxt = torch.where(movable.expand(b, k), proposal, factors)

        # At least one change: for unchanged rows pick one movable factor uniformly and redraw it
        # with its current value excluded (reference: p[x == start] = 0, renormalise). Computed for every
        # row and selected with ``where`` so that there is no host synchronisation on a GPU.
        unchanged = (nxt == factors).all(dim=1, keepdim=True)                         # [B, 1]
        which = torch.multinomial(movable.to(torch.float64).expand(b, k), 1, generator=generator)   # [B, 1]
        start = factors.gather(1, which)
        redraw_logits = truncated_laplace_logits(start.squeeze(1), sizes[which.squeeze(1)], rate[:, 0], self.max_size)
        redraw_logits.scatter_(1, start, float("-inf"))
        redraw = torch.multinomial(torch.softmax(redraw_logits, dim=-1), 1, generator=generator)    # [B, 1]
        fixed = nxt.scatter(1, which, redraw.to(nxt.dtype))
        nxt = torch.where(unchanged, fixed, nxt)
        return nxt


def resolve_frozen_factors(frozen: Sequence[int | str] | None, factor_names: Sequence[str] | None, num_factors: int) -> list[int]:
    """Frozen factor indices from a config value.

    ``None`` (default): the factor named ``"shape"`` if the names are known and contain it (the reference
    freezes shape in dSprites and Shapes3D), otherwise none. A list may hold indices or factor names.
    """
    names = [str(n) for n in factor_names] if factor_names is not None else None
    if frozen is None:
        return [names.index("shape")] if names and "shape" in names else []
    out = []
    for item in frozen:
        if isinstance(item, str):
            if names is None or item not in names:
                raise UserError(f"frozen factor {item!r} is not a factor of this dataset (factors: {names})")
            out.append(names.index(item))
        else:
            idx = int(item)
            if not 0 <= idx < num_factors:
                raise UserError(f"frozen factor index {idx} out of range for {num_factors} factors")
            out.append(idx)
    return sorted(set(out))
