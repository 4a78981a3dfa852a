"""Clip factors and clipped sums over examples, shared by both per-example paths (:mod:`backbones.mae.per_example`,
the reference, and :mod:`backbones.mae.ghost`, the fast path): one definition of what an example may contribute."""
from __future__ import annotations

import torch

__all__ = ["clip_factors", "dropped", "zero_rows", "weighted_sum"]


def clip_factors(norms: torch.Tensor, clip: float, finite: torch.Tensor | None = None) -> torch.Tensor:
    """Per-example scales ``min(1, clip / (norm + 1e-6))``: scaled norms are at most ``clip``.

    The small term keeps the clipped norm at or below ``clip`` despite rounding. An example whose norm is not
    finite (or whose ``finite`` entry is False: its loss was not) gets 0: it contributes nothing, as the null image
    of the zero-out relation does, so a NaN or an overflow in one private image changes neither the sensitivity
    nor whether the run goes on (:func:`weighted_sum` keeps its non-finite values out of the sum).
    """
    if not clip > 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    ok = torch.isfinite(norms) if finite is None else torch.isfinite(norms) & finite
    return torch.where(ok, (clip / (norms + 1e-6)).clamp(max=1.0), 0.0)


def dropped(scale: torch.Tensor) -> torch.Tensor | None:
    """The examples :func:`clip_factors` gave 0 (non-finite ones), or None when there are none (the usual case).

    One host synchronization; the caller then zeroes those examples' rows (``0 * nan`` is nan).
    """
    out = scale == 0
    return out if bool(out.any()) else None


def zero_rows(x: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
    """``x`` with the examples (first dimension) in ``rows`` set to exactly 0; ``x`` itself when ``rows`` is None."""
    return x if rows is None else torch.where(rows.view(-1, *(1,) * (x.ndim - 1)), 0.0, x)


def weighted_sum(scale: torch.Tensor, x: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """``sum_i scale_i x_i`` over the first dimension, the examples in ``rows`` (:func:`dropped`) left out exactly."""
    return torch.einsum("b,b...->...", scale, zero_rows(x, rows))
