"""Feature preprocessing of DP-RandP (seed 004, App. G.1): normalize, privately center, re-normalize.

1. Each row is scaled to a fixed norm (``x * norm / ||x||``).  The map is
   per-row and data-independent, so it costs no privacy, and it bounds every
   row's contribution to a sum by ``norm``.
2. The mean of the normalized rows is released with the Gaussian mechanism
   (noise ``sigma_center * norm`` on the sum, divided by the public N).  Its
   noise multiplier enters the accountant beside the training steps.  The
   noisy mean is then shrunk toward 0 by James–Stein (post-processing,
   :func:`shrink`): where the noise is as large as the mean (few rows, small
   ε, large d), subtracting it would add more error than the offset it
   removes (BENCHMARKS.md, "privlin defaults on unseen data").
   Where that noise is small against ``norm`` but can still be large against the rows' own spread (a tight
   cloud far from the origin: backbone features, whose rows share most of their direction), the mean is
   released in two stages (:func:`center_stages`, CoinPress of Biswas et al., NeurIPS 2020): the first at
   noise multiplier σ·√2 as above; the second sums each row's offset from that first estimate, clipped to a
   radius R (:func:`refine_radius`, public: 1.5× the first stage's expected error), at σ·√2·R.  The two
   Gaussian releases compose to exactly one at σ, and the second's error scales with R instead of ``norm``.
   Where even that error is large against ``norm`` (few rows, small ε), re-centering rounds come first
   (:func:`recenter_rounds`, public): each releases the mean of the current rows (sensitivity ``norm``),
   subtracts it and normalizes again.  While the residual offset dominates a tight cloud, the re-normalization
   magnifies it by 1/‖offset‖, so each round's noise is measured against what is left, not against ``norm``.
3. Rows are centered by the noisy mean and normalized again, so the trainer's
   clipping sees rows of norm ``norm``.  The noise in the mean is the same for
   every row: a fixed, data-independent shift, which training tolerates well.

All functions are pure and work on NumPy or JAX arrays (jittable).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from .. import noise, sensitivity
from . import norms as radius

__all__ = ["normalize_rows", "row_sum", "shrink", "private_mean", "center_stages", "stage_sigma", "refine_radius",
           "offset_sum", "refined_mean", "staged_mean", "recenter_rounds", "round_means", "RowMap", "apply",
           "RECENTER_ROUNDS", "RECENTER_FROM"]

#: The refining stage's radius in units of the first stage's expected error norm √D·σ₁·norm/N: the noise of a
#: Gaussian mean in D ≥ 5 dimensions stays below 1.5× that with probability ≥ 0.95 (χ²₅'s 95% point is 2.2× its
#: mean); a row farther from the first estimate is clipped to it, which only slows the correction.
REFINE_RADIUS = 1.5
#: Re-centering rounds made where they are made (:func:`recenter_rounds`), and the centering's expected error, in
#: units of the row norm, from which they are made: below norm/10 the two-stage centering is already finer than
#: the clouds met so far and the rounds' share would buy nothing (BENCHMARKS.md, "privlin defaults on unseen
#: data").
RECENTER_ROUNDS = 2
RECENTER_FROM = 0.1
#: The two-stage centering is made where one stage's expected error lies between these fractions of the row
#: norm: above TWO_STAGES_TO two stages end coarser than one (their error ≈ 3e²/norm); below TWO_STAGES_FROM one
#: stage is already finer than any cloud of rows met so far, and a second would cost a pass for nothing.
TWO_STAGES_FROM = 1.0 / 100.0
TWO_STAGES_TO = 1.0 / 3.0



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


def row_sum(X, mask, norm: float, n, log_scale=None, rounds=None, skip=None):
    """Σ_i mask_i · (row i at norm ``norm``), exact (float64; :mod:`privlin.sensitivity`); with ``log_scale``,
    each row with its radial coordinate (:func:`.norms.embed`), and with ``rounds`` (the released means
    (R, d') of earlier re-centering rounds) re-centered by them, as :func:`apply` gives it (``skip``: see
    :class:`RowMap`; where every round is skipped, bitwise the sum without ``rounds``).

    Each row enters at norm ``norm·(1 − η)`` (the margin that makes its snapped form ≤ ``norm``), so the sum
    moves by at most ``norm`` when one row is replaced by a null row (``replace_special``).  ``n``: the public
    N.  Trace under ``privlin.sensitivity.x64()``.

    Returns
    -------
    array (d,) or (d + 1,) float64
    """
    if rounds is None or skip is not None:
        unrounded = X if log_scale is None else radius.embed(X, log_scale)
    if rounds is None:
        X = unrounded
    else:
        X = apply(X, RowMap(1.0, rounds, log_scale, skip))
        if skip is not None:
            X = jnp.where(skip >= rounds.shape[0], unrounded, X)
    A, _ = sensitivity.directions(X)
    eta = sensitivity.margin(n, A.shape[1])
    return sensitivity.vector_sum(A * (norm * (1.0 - eta)), mask, norm)


def shrink(v, noise_std, target=None):
    """James–Stein (positive part) estimate of a vector ``v`` (d,) seen through i.i.d. noise of std ``noise_std``,
    shrunk toward the constant ``target`` (d − 2 degrees), or toward the mean of ``v`` when None (d − 3)."""
    d = v.shape[-1]
    dof = max(d - (3 if target is None else 2), 0)
    center = jnp.mean(v) if target is None else target
    r = v - center
    factor = jnp.maximum(0.0, 1.0 - dof * noise_std**2 / jnp.maximum(jnp.sum(r * r), jnp.finfo(r.dtype).tiny))
    return center + factor * r


def private_mean(total, n: int, key: jax.Array, sigma: float, norm: float = 1.0, noisy=None):
    """The released mean: the Gaussian mechanism on the sum, (total + N(0, (sigma*norm)² I)) / n, shrunk toward 0
    (:func:`shrink`, post-processing: noise std ``sigma*norm/n`` per coordinate), its entries clipped to
    [−norm, norm] (where every mean of rows at norm ``norm`` lies: post-processing too).

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
    noisy : array (d,), optional
        The already noised sum (secure mode draws the discrete Gaussian on the host); ``key`` is then unused.
    """
    if noisy is None:
        noisy = total + noise.gaussian(key, total.shape, sigma * norm)
    mean = shrink(jnp.asarray(noisy) / n, sigma * norm / n, 0.0)  # float64 under x64
    return jnp.asarray(jnp.clip(mean, -norm, norm), jnp.float32)  # as every mean of rows at norm ``norm`` is


def _error_norm(sigma, n, dim: int, norm: float):
    """Expected norm of the noise of a released mean, √D·σ·norm/N (public)."""
    return (dim ** 0.5) * sigma * norm / n


def center_stages(sigma_center: float, n: int, dim: int, norm: float = 1.0) -> int:
    """How many stages the centering release takes (public): 2 where one stage's expected error e = √D·σ·norm/N
    lies in [:data:`TWO_STAGES_FROM`, :data:`TWO_STAGES_TO`]·norm.  Two stages end at error ≈ 3e²/norm (the
    second's radius is 1.5·√2·e, its noise √2·e per unit radius), so they win below norm/3."""
    if not 0.0 < sigma_center < float("inf"):
        return 1
    e = _error_norm(sigma_center, n, dim, norm)
    return 2 if norm * TWO_STAGES_FROM <= e <= norm * TWO_STAGES_TO else 1


def recenter_rounds(sigma_center: float, n: int, dim: int, norm: float = 1.0) -> int:
    """How many re-centering rounds run before the centering (public): :data:`RECENTER_ROUNDS` where the
    centering's expected error e = √D·σ·norm/N is at least :data:`RECENTER_FROM`·norm, else 0.  ``sigma_center``:
    the centering's multiplier as the plan decides it (its share of the GDP budget)."""
    if not 0.0 < sigma_center < float("inf"):
        return 0
    return RECENTER_ROUNDS if _error_norm(sigma_center, n, dim, norm) >= RECENTER_FROM * norm else 0


def round_means(sum_of, n, keys, sigma_rounds, rounds: int, norm: float):
    """The re-centering rounds' releases (R, d'): round j is :func:`private_mean` of ``sum_of(previous)`` — the
    caller's :func:`row_sum` of the rows re-centered by the rounds before it (None for the first), in memory or one
    pass over a store — at noise multiplier :func:`stage_sigma` (``sigma_rounds``, R), so that together they are
    the one release at ``sigma_rounds`` the plan paid for.  ``keys``: (R, 2), one per round."""
    sigma = stage_sigma(sigma_rounds, rounds)
    means = None
    for j in range(rounds):
        m = private_mean(sum_of(means), n, keys[j], sigma, norm)[None]
        means = m if means is None else jnp.concatenate([means, m])
    return means


def stage_sigma(sigma_center, stages: int):
    """Noise multiplier of each of the centering's ``stages`` Gaussian releases: σ·√stages, so that together
    (μ² = Σ 1/σ²) they are exactly the one release at ``sigma_center`` the plan paid for."""
    return sigma_center * (stages ** 0.5 if isinstance(stages, int) else jnp.sqrt(stages))  # both correctly rounded


def refine_radius(sigma_center, n, dim: int, norm: float = 1.0):
    """The second stage's clip radius R: :data:`REFINE_RADIUS` × the first stage's expected error (its noise
    multiplier :func:`stage_sigma` of 2), at most ``norm`` (public; ``sigma_center`` may be traced)."""
    return jnp.minimum(norm, REFINE_RADIUS * _error_norm(stage_sigma(sigma_center, 2), n, dim, norm))


def offset_sum(X, mask, first, radius_, n, norm: float, log_scale=None, rounds=None, skip=None):
    """Σ_i mask_i · clip_R(row_i − ``first``) / ``norm`` exactly (float64; in units of the row norm, so that every
    chunk's sum is exact and so is their total), rows as :func:`apply` makes them before centering (at norm
    ``norm``, with their radial coordinate under ``log_scale``, re-centered by ``rounds``): the refining stage's sum.

    Each offset as summed has norm ≤ R (:func:`privlin.sensitivity.offsets_sum`), so the sum moves by at most
    R / ``norm`` when one row is replaced by a null row.  ``first``: the first stage's released mean (public).
    """
    U = apply(X, RowMap(norm, rounds, log_scale, skip)) * jnp.float32(1.0 / norm)
    r = radius_ / norm
    return sensitivity.offsets_sum(U, mask, jnp.asarray(first, jnp.float64) / norm, r, 1.0, r, n)


def refined_mean(first, total, n: int, key, sigma: float, radius_, noisy=None, norm: float = 1.0):
    """The second stage's release: ``first`` + :func:`private_mean` of the clipped offsets' sum ``total`` (in units
    of the row norm ``norm``, :func:`offset_sum`): noise ``sigma·radius_/norm`` on it, then the James–Stein shrink
    of the correction toward 0, then back at the rows' scale (post-processing)."""
    mean = jnp.asarray(first, jnp.float32) + norm * private_mean(total, n, key, sigma, radius_ / norm, noisy)
    return jnp.clip(mean, -norm, norm)


def staged_mean(total, offsets_of, n, keys, sigma_center, stages, norm: float, dim: int, most: int | None = None):
    """The centering release in ``stages`` (1 or 2, :func:`center_stages`): :func:`private_mean` of ``total``
    (:func:`row_sum`), then, with two, :func:`refined_mean` of ``offsets_of(first, R)`` — the caller's
    :func:`offset_sum` over all rows, in memory or one more pass over a store.  ``keys``: (first's, second's).

    ``stages`` may be traced (plans of either count vmapped together): then ``most`` (static) is the largest count
    among them, and with ``most`` = 2 the refining stage is computed for every plan and kept where ``stages`` = 2.
    """
    most = stages if most is None else most
    sigma = stage_sigma(sigma_center, stages)
    mean = private_mean(total, n, keys[0], sigma, norm)
    if most == 2:
        r = refine_radius(sigma_center, n, dim, norm)
        refined = refined_mean(mean, offsets_of(mean, r), n, keys[1], sigma, r, norm=norm)
        mean = refined if isinstance(stages, int) else jnp.where(jnp.asarray(stages) == 2, refined, mean)
    return mean


class RowMap(NamedTuple):
    """What :func:`apply` needs: the row norm, the (noisy, public) mean or None, and the released log₂ of a typical
    row norm (:mod:`.norms`) or None.  ``mean`` may be a chain (R, d'): the re-centering rounds' means,
    then the centering's, each subtracted in turn and followed by a re-normalization.  ``skip`` (traced; None:
    0): how many leading means of the chain are passed over, the rows left bitwise as without them (the
    re-centering rounds of a plan that makes none, in a program shared with plans that make them:
    :func:`privlin.fit_groups.shared_form`)."""

    norm: float = 1.0
    mean: Optional[jax.Array] = None  # (d',) or (R, d'); d' = d, or d + 1 with the radial coordinate
    log_scale: Optional[jax.Array] = None
    skip: Optional[jax.Array] = None


def apply(X, prep: RowMap):
    """Normalize rows (with ``prep.log_scale``: give them their radial coordinate, :func:`.norms.embed`),
    subtract the released mean, normalize again (DP-RandP).

    Parameters
    ----------
    X : array (n, d)
    prep : RowMap

    Returns
    -------
    array (n, d) or (n, d + 1) with rows of norm ``prep.norm`` (zero rows stay zero)
    """
    Xn = normalize_rows(X, prep.norm) if prep.log_scale is None else radius.embed(X, prep.log_scale) * prep.norm
    if prep.mean is None:
        return Xn
    means = jnp.asarray(prep.mean, Xn.dtype)
    for j, m in enumerate(means[None] if means.ndim == 1 else means):  # the rounds' means, then the centering's
        moved = normalize_rows(Xn - m, prep.norm)
        Xn = moved if prep.skip is None else jnp.where(j < prep.skip, Xn, moved)
    return Xn
