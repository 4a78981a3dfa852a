"""Feature preprocessing of DP-RandP (seed 004, App. G.1): normalize, privately center, re-normalize.

1. Each row is scaled to a fixed norm (``x * norm / ||x||``).  The map is
   per-row and data-independent, so it costs no privacy, and it bounds every
   row's contribution to a sum by ``norm``.
2. The mean of the normalized rows is released with the Gaussian mechanism
   (noise ``sigma_center * norm`` on the sum, divided by the public N).  Its
   noise multiplier enters the accountant beside the training steps.
3. Rows are centered by the noisy mean and normalized again, so the trainer's
   clipping sees rows of norm ``norm``.  The noise in the mean is the same for
   every row: a fixed, data-independent shift, which training tolerates well.

All functions are pure and work on NumPy or JAX arrays (jittable).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from . import noise, radius, sensitivity

__all__ = ["normalize_rows", "row_sum", "private_mean", "Preprocessing", "apply"]



def normalize_rows(X, norm: float = 1.0):
    """Rows scaled to L2 norm ``norm`` (float32); all-zero rows stay zero; any finite row, however large or
    small, keeps its direction (it is scaled by a power of two before its norm is taken).

    Parameters
    ----------
    X : array (n, d)
    norm : float
        Target norm (public constant).

    Returns
    -------
    array (n, d), float32
    """
    return sensitivity.directions(X)[0] * norm


def row_sum(X, mask, norm: float, n, log_scale=None):
    """Σ_i mask_i · (row i at norm ``norm``), exact (float64; :mod:`privlin.sensitivity`); with ``log_scale``,
    each row with its radial coordinate (:func:`privlin.radius.embed`), as :func:`apply` gives it.

    Each row enters at norm ``norm·(1 − η)`` (the margin that makes its snapped form ≤ ``norm``), so the sum
    moves by at most ``norm`` when one row is replaced by a null row (``replace_special``).  ``n``: the public
    N.  Trace under ``privlin.sensitivity.x64()``.

    Returns
    -------
    array (d,) or (d + 1,) float64
    """
    A, _ = sensitivity.directions(X if log_scale is None else radius.embed(X, log_scale))
    eta = sensitivity.margin(n, A.shape[1])
    return sensitivity.vector_sum(A * (norm * (1.0 - eta)), mask, norm, n)


def private_mean(total, n: int, key: jax.Array, sigma: float, norm: float = 1.0):
    """The Gaussian-mechanism mean: (total + N(0, (sigma*norm)² I)) / n.

    Parameters
    ----------
    total : array (d,)
        :func:`row_sum` of the private split (exact, float64).
    n : int
        Number of rows (public under the neighbouring relation).
    key : jax key
        Used once, for this statistic only.
    sigma : float
        Noise multiplier of the centering mechanism (``inf`` is not allowed: skip centering instead).
    """
    return jnp.asarray((total + noise.gaussian(key, total.shape, sigma * norm)) / n, jnp.float32)


class Preprocessing(NamedTuple):
    """What :func:`apply` needs: the row norm, the (noisy, public) mean or None, and the released log₂ of a typical
    row norm (:mod:`privlin.radius`) or None."""

    norm: float = 1.0
    mean: Optional[jax.Array] = None  # (d,), or (d + 1,) with the radial coordinate
    log_scale: Optional[jax.Array] = None


def apply(X, prep: Preprocessing):
    """Normalize rows (with ``prep.log_scale``: give them their radial coordinate, :func:`privlin.radius.embed`),
    subtract the released mean, normalize again (DP-RandP).

    Parameters
    ----------
    X : array (n, d)
    prep : Preprocessing

    Returns
    -------
    array (n, d) or (n, d + 1) with rows of norm ``prep.norm`` (zero rows stay zero)
    """
    Xn = normalize_rows(X, prep.norm) if prep.log_scale is None else radius.embed(X, prep.log_scale) * prep.norm
    if prep.mean is None:
        return Xn
    return normalize_rows(Xn - jnp.asarray(prep.mean, Xn.dtype), prep.norm)
