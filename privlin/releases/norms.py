"""The row-norm release and the radial coordinate: what normalizing the rows throws away, given back.

Why: the pipeline's first step scales every row to a fixed norm (DP-RandP; it is what bounds every released
sum), which discards each row's norm.  Where features carry a common offset larger than their spread (raw tabular
features, some backbones'), the class signal along the offset lives in the norm, and no later stage can recover
the lost direction (BENCHMARKS.md, "privlin defaults on unseen data").  Rows keep it as one more coordinate next to their direction::

    embed(x) = ( x/‖x‖ ,  r ) / √(1 + r²),    r = clip(ln(‖x‖/R), −1, 1)          (0 for an all-zero row)

a bounded, per-row map once R is fixed, to rows of norm 1: it takes the place of the pipeline's first
normalization (:func:`.preprocess.apply`).  R, a typical row norm, must come from the data, so it is released:

* **the release** — the histogram of ⌊log₂‖x‖⌋ over :data:`BINS` fixed bins (every finite float32 norm has one;
  all-zero rows are not counted), with noise N(0, σ_r²) on every count: one ``GaussianDpEvent(σ_r)``.  Under
  zero-out neighbours (``replace_special``) one row moves one count by 1 (L2 sensitivity 1; √2 under
  ``replace_one``, which the accountant's relation covers).  Counts are integers summed exactly.
* **post-processing** — R = 2^(j+1) at the heaviest pair of adjacent noisy bins (j, j+1), so a norm anywhere in the
  pair is within a factor 2 of R and its coordinate is not clipped.  The plan buys the release only where a pair
  holding half the rows stands above the noise of every pair (:func:`resolves`); with a wrong R the coordinate
  is clipped, less informative, and still bounded.

The coordinate is centered, scaled and whitened with the rest of the row by the stages that follow
(:mod:`.preprocess`, :mod:`.scaling`), which set its weight: its scale here does not matter much.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from .. import noise, sensitivity

__all__ = ["BINS", "LOG2_LOW", "RADIAL_CLIP", "log2_norms", "norm_counts", "release_log_scale", "embed",
           "resolves"]

#: ⌊log₂‖x‖⌋ of a finite nonzero float32 row lies in [−149, 128 + ½·log₂ d]: bins LOG2_LOW … LOG2_LOW + BINS − 1
#: (values outside are put in the end bins).
LOG2_LOW = -150
BINS = 300
#: The coordinate is ln(‖x‖/R) clipped to ±RADIAL_CLIP.
RADIAL_CLIP = 1.0


def log2_norms(X) -> jax.Array:
    """log₂ of each row's L2 norm (m,) float32, without overflow or underflow for any finite row
    (:func:`privlin.sensitivity.directions_and_log2_norms`); −inf for an all-zero row."""
    return sensitivity.directions_and_log2_norms(X)[1]


def norm_counts(X, mask) -> jax.Array:
    """The histogram (BINS,) of ⌊log₂‖x‖⌋ over the rows with ``mask`` 1 and a nonzero norm: exact integer counts
    (int32; a store has fewer than 2³¹ rows).  One row replaced by a null row moves one count by 1."""
    lg = log2_norms(X)
    live = (jnp.asarray(mask) > 0) & jnp.isfinite(lg)
    idx = jnp.clip(jnp.floor(jnp.where(live, lg, 0.0)) - LOG2_LOW, 0, BINS - 1).astype(jnp.int32)
    return jnp.zeros(BINS, jnp.int32).at[idx].add(live.astype(jnp.int32))


def release_log_scale(counts, key, sigma: float, noisy=None) -> jax.Array:
    """log₂ R (a float32 scalar, an integer) from the counts with noise N(0, σ²) each; ``noisy``: counts already
    released (secure mode's discrete Gaussian), then ``key`` and ``sigma`` are unused.  The noise is added in
    float64 (trace under ``sensitivity.x64()``): a count stays exact, so one row still moves it by exactly 1
    (in float32 a count above 2²⁴ would round by 2)."""
    sensitivity.require_x64()
    if noisy is None:
        noisy = jnp.asarray(counts, jnp.float64) + noise.gaussian(key, (BINS,), sigma, jnp.float64)
    noisy = jnp.asarray(noisy, jnp.float64)
    j = jnp.argmax(noisy[:-1] + noisy[1:])
    return jnp.asarray(LOG2_LOW + j + 1, jnp.float32)


def embed(X, log_scale) -> jax.Array:
    """Rows (m, d) → unit rows (m, d + 1): the direction and r = ln(‖x‖/R) clipped to ±:data:`RADIAL_CLIP`, over
    √(1 + r²) (float32; an all-zero row stays zero).  ``log_scale``: log₂ R, released (may be traced)."""
    A, lg = sensitivity.directions_and_log2_norms(X)
    r = jnp.clip((lg - log_scale) * math.log(2.0), -RADIAL_CLIP, RADIAL_CLIP)
    r = jnp.where(jnp.isfinite(lg), r, 0.0).astype(jnp.float32)[:, None]
    return jnp.concatenate([A, r], axis=1) * jax.lax.rsqrt(1.0 + r * r)


def resolves(n: int, sigma: float) -> bool:
    """Whether the release can find R: a pair of bins holding half of the N rows stands 2 standard deviations above
    the largest of the other pairs' noise (√2·σ each; the expected maximum of BINS Gaussians is below
    √(2 ln BINS) standard deviations)."""
    return n / 2.0 >= math.sqrt(2.0) * sigma * (math.sqrt(2.0 * math.log(BINS)) + 2.0)
