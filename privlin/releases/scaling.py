"""Private scaling of the centered rows: per-dimension standardization, then whitening (the stage after centering).

Why: private centering (:mod:`.preprocess`) removes the common direction of the rows, but what is left is
still unequally scaled and collinear (a frozen backbone's features: a few directions carry most of the norm).
Full-batch DP-SGD adds the same noise to every weight, so it learns the directions where the rows vary little
slowly and the classes there late or never; a non-private solver (L-BFGS) does not care.  A public linear map that
makes the rows' second moment close to the identity turns the first noisy gradient into the discriminant direction
(in whitened coordinates the class-mean difference *is* Fisher's LDA direction), so the same noise buys a better
model.  The map is estimated privately, from two released sums, and costs its share of the budget.

The stage, on the rows ``z_i`` that centering produced (normalized, centered by the released mean, normalized:
unit norm), N public, zero-out neighbours (``replace_special``: a null row contributes nothing to any sum):

1. **moments** — ``Σ z_i`` and ``Σ z_i⊙z_i``, each of L2 sensitivity 1 (‖z⊙z‖₂ ≤ ‖z‖₂² = 1), released together
   (sensitivity √2) with noise ``N(0, 2σ_m²)`` on every coordinate: one ``GaussianDpEvent(σ_m)``.  Post-processing,
   with ``τ_m = √2·σ_m/N`` the noise standard deviation of each released mean and second moment:
   ``shift = Σz/N`` (a second, finer centering: the first one's noise is now measured against unit rows) and the
   variances ``var = Σz²/N − shift²``, each vector shrunk by James–Stein (positive part; James & Stein 1961, Efron
   & Morris 1973) — the shift toward 0, the variances toward their mean — so that rows that are already centered
   or standardized are left as they are instead of being distorted by the release's noise; then
   ``scale = 1/√(max(var, 0) + τ_m)``: a dimension whose variance cannot be told from the noise is not blown up.
2. **whitening** — the upper triangle of ``Σ b_i b_iᵀ`` over the standardized rows ``b_i`` (unit norm; Frobenius
   sensitivity ‖b bᵀ‖ = 1) with noise ``N(0, σ_w²)`` per entry, mirrored (the Analyze-Gauss release of Dwork,
   Talwar, Thakurta & Zhang, STOC 2014): one ``GaussianDpEvent(σ_w)``.  Post-processing: eigendecomposition
   ``U Λ Uᵀ`` and ``rotate = U (max(Λ, 0) + τ_w + τ_s)^(−1/2) Uᵀ`` with ``τ_w = σ_w·√d/N``, the BBP threshold of
   a Wigner perturbation (Benaych-Georges & Nadakuditi 2011), and ``τ_s`` the Marchenko–Pastur edge of the sample
   itself (:func:`sampling_floor`): eigenvalues below them cannot be told from the noise or from the sampling
   spread, so they are shrunk rather than amplified.

3. **curvature** (made where the plan buys it, on the rows training sees, scaled or only centered) — the top
   eigenvalue of ``Σ x_i x_iᵀ`` over their directions (:func:`second_moment_sum`), with noise N(0, (σ_c·Δ)²):
   one ``GaussianDpEvent(σ_c)``.  Δ is 1 (Weyl: a null row moves the sum by a rank-one ``b bᵀ`` of norm ≤ 1)
   plus the eigensolver's error (:func:`curvature_sensitivity`).  Post-processing: an upper confidence bound on
   the top eigenvalue of the rows' second moment (:func:`curvature_bound`), from which the plan lifts the
   weights' stability cap (:func:`privlin.plan.learning_rates`): whitened rows are ≈ d× flatter than the
   worst case the cap assumes.

Rows used for training and prediction: ``normalize(normalize((z − shift)·scale) @ rotate)`` (``rotate`` is the
identity when whitening is off).  Every sum is exact (:mod:`privlin.sensitivity`; trace under
``sensitivity.x64()``).  Whether each release is worth its share is decided by the plan from public facts only
(:func:`moments_resolve`, :func:`whitening_resolves`); the budget split is in :mod:`privlin.plan`.

All functions are pure and jittable; noise only through :mod:`privlin.noise` with the key given.  The runner
(:mod:`privlin.runner`) makes the two passes, in memory or streamed.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from .. import noise, sensitivity
from . import preprocess

__all__ = ["Scaling", "moment_sums", "second_moment_sum", "release_moments", "release_rotation", "standardized",
           "apply", "moment_noise_level", "rotation_noise_level", "sampling_floor", "rotation_floor",
           "moments_resolve", "whitening_resolves",
           "WHITEN_MAX_DIM", "WHITEN_MAX_WORK", "second_moment_affordable", "release_curvature", "curvature_bound", "top_eigenvalue", "curvature_sensitivity",
           "CURVATURE_Z"]

#: Whitening needs a (d, d) float64 sum and its eigendecomposition; above this dimension only the diagonal is used.
WHITEN_MAX_DIM = 4096
#: A release is made only where its noise level (τ_m, or the whitening's floor τ) is below this, i.e. where at
#: least two of the variances or eigenvalues (they sum to ≤ 1 on unit rows) can stand above the noise.
RESOLVE_LEVEL = 0.5
#: The smallest variance a dimension is scaled by, relative to the mean variance, where there is no noise
#: (ε = ∞): a constant dimension is left as it is rather than divided by zero.
VARIANCE_FLOOR = 1e-6
#: Below any variance of float32 rows: keeps the rsqrt finite.
TINY = 1e-30
#: ... and above N·d² multiply-adds (the float64 second-moment pass, ~1 min on 2 CPU cores) likewise.
WHITEN_MAX_WORK = 2.0**36


class Scaling(NamedTuple):
    """The released, public map of the stage: ``shift`` (d,), ``scale`` (d,), ``rotate`` (d, d) or None."""

    shift: jax.Array
    scale: jax.Array
    rotate: Optional[jax.Array] = None


# ----------------------------------------------------------------------------- public facts: noise levels

def moment_noise_level(n: int, sigma_m: float) -> float:
    """τ_m = √2·σ_m/N: standard deviation of the released per-dimension second moment."""
    return math.sqrt(2.0) * sigma_m / n


def rotation_noise_level(n: int, dim: int, sigma_w: float) -> float:
    """τ_w = σ_w·√d/N: the BBP threshold of the released (d, d) second moment's noise (half its spectral norm)."""
    return sigma_w * math.sqrt(dim) / n


def sampling_floor(n, dim: int):
    """τ_s = (2√γ + γ)/d, γ = d/N: how far above 1/d the top eigenvalue of the second moment of N unit rows spread
    evenly over d dimensions lands (the Marchenko–Pastur edge (1 + √γ)²/d; its bottom edge lies as far below).
    Whitening by the sample's own second moment amplifies the directions the sample underestimates, which no sample
    of N rows can tell from an even spread (BENCHMARKS.md, "privlin defaults on unseen data").  Public (N, d);
    ``n`` may be traced."""
    gamma = dim / n
    return (2.0 * gamma**0.5 + gamma) / dim


def rotation_floor(n, dim: int, sigma_w: float):
    """τ = τ_w + τ_s: the eigenvalue below which whitening shrinks a direction instead of amplifying it, since it
    cannot be told from the release's noise (:func:`rotation_noise_level`) or the sample's spread
    (:func:`sampling_floor`)."""
    return rotation_noise_level(n, dim, sigma_w) + sampling_floor(n, dim)


def moments_resolve(n: int, dim: int, sigma_m: float) -> bool:
    """Whether at least two per-dimension variances can be told from the noise (they sum to ≤ 1 on unit rows, so
    at most 1/τ_m of them exceed τ_m)."""
    return dim >= 2 and moment_noise_level(n, sigma_m) < RESOLVE_LEVEL


def second_moment_affordable(n: int, dim: int) -> bool:
    """Whether a (d, d) second-moment pass over N rows is worth making and bounded in cost: 2 ≤ d ≤ WHITEN_MAX_DIM
    and N·d² ≤ WHITEN_MAX_WORK (whitening's release and the curvature release both need one)."""
    return 2 <= dim <= WHITEN_MAX_DIM and float(n) * dim * dim <= WHITEN_MAX_WORK


def whitening_resolves(n: int, dim: int, sigma_w: float) -> bool:
    """Whether the release can resolve at least two directions (eigenvalues sum to ≤ 1, so at most 1/τ of them
    exceed τ = :func:`rotation_floor`) and its cost is bounded (:func:`second_moment_affordable`)."""
    return second_moment_affordable(n, dim) and rotation_floor(n, dim, sigma_w) < RESOLVE_LEVEL


# ----------------------------------------------------------------------------- exact sums (the private part)

def moment_sums(Z, mask, n) -> jax.Array:
    """``[Σ z_i, Σ z_i⊙z_i]`` (2, d) float64, exact, for rows ``Z`` (any norm: each enters as its direction).

    Each of the two sums moves by at most 1 when one row is replaced by a null row: the first is
    :func:`.preprocess.row_sum` at norm 1; the second sums ``z⊙z`` as direction × clipped norm (≤ 1).
    """
    first = preprocess.row_sum(Z, mask, 1.0, n)
    A, _ = sensitivity.directions(Z)
    sq_dir, sq_norm = sensitivity.directions(A * A)
    eta = sensitivity.margin(n, A.shape[1])
    second = sensitivity.vector_sum(sq_dir * (jnp.minimum(sq_norm, 1.0) * (1.0 - eta))[:, None], mask, 1.0)
    return jnp.stack([first, second])


def second_moment_sum(Z, mask, n) -> jax.Array:
    """``Σ b_i b_iᵀ`` (d, d) float64, exact, over the directions ``b_i`` of the rows (Frobenius sensitivity 1)."""
    A, _ = sensitivity.directions(Z)
    d = A.shape[1]
    B = A * (1.0 - sensitivity.margin(n, d, outer_dims=d))
    return sensitivity.outer_sum(A, B, mask, 1.0, n)


# ----------------------------------------------------------------------------- releases and their public maps

def release_moments(sums, n, key, sigma_m, noisy=None, sampling=None) -> tuple[jax.Array, jax.Array]:
    """(shift, scale) from :func:`moment_sums` with noise N(0, 2σ_m²) per coordinate (``GaussianDpEvent(σ_m)``).

    ``noisy``: the already noised sums (secure mode adds the discrete Gaussian on the host); then ``key`` and the
    noise here are unused.  ``sampling``: a floor added to every variance (None: none), where the coordinates are
    directions fitted to these same rows (:mod:`.project`), whose trailing variances the sample underestimates.
    """
    if noisy is None:
        noisy = sums + noise.gaussian(key, sums.shape, math.sqrt(2.0) * sigma_m)
    tau = moment_noise_level(n, sigma_m)
    m = preprocess.shrink(jnp.asarray(noisy[0], jnp.float64) / n, tau, 0.0)
    var = jnp.maximum(preprocess.shrink(jnp.asarray(noisy[1], jnp.float64) / n - m * m, tau), 0.0)
    floor = tau + VARIANCE_FLOOR * jnp.mean(var)  # ε = ∞: no noise, but no division by a zero variance either
    if sampling is not None:
        floor = floor + sampling
    scale = jax.lax.rsqrt(var + jnp.maximum(floor, TINY))
    return jnp.asarray(m, jnp.float32), jnp.asarray(scale / jnp.max(scale), jnp.float32)


def upper(M) -> jax.Array:
    """The upper triangle (diagonal included) of a square matrix, as a vector: what the whitening release noises."""
    i, j = jnp.triu_indices(M.shape[0])
    return M[i, j]


def symmetric(v, d: int) -> jax.Array:
    """The symmetric (d, d) matrix whose upper triangle is ``v`` (inverse of :func:`upper`)."""
    i, j = jnp.triu_indices(d)
    M = jnp.zeros((d, d), v.dtype).at[i, j].set(v)
    return M + jnp.triu(M, 1).T


def release_rotation(M, n, key, sigma_w, noisy=None) -> jax.Array:
    """The whitening map (d, d) from :func:`second_moment_sum`: noise N(0, σ_w²) on each upper entry, mirrored
    (``GaussianDpEvent(σ_w)``), then ``U (max(Λ, 0) + τ)^(−1/2) Uᵀ``, τ = :func:`rotation_floor`.  ``noisy``: an
    already noised upper triangle.

    The noised sum is mirrored and divided by N in float64; from :data:`FLOAT32_ROTATION_DIM` dimensions on, its
    eigendecomposition and the map are computed in float32: post-processing of the release, whose eigenvalues'
    float32 error (≈ 2⁻²⁴·‖C‖, ‖C‖ ≤ 1 + 2τ_w) lies far below the floor τ they are shrunk at, and the rows it maps
    are float32 anyway; there float64 takes about twice the time (BENCHMARKS.md, "First fit, refit, grid search")."""
    d = M.shape[0]
    if noisy is None:
        u = upper(M)
        noisy = u + noise.gaussian(key, u.shape, sigma_w)
    C = symmetric(jnp.asarray(noisy, jnp.float64), d) / n
    dtype = jnp.float32 if d >= FLOAT32_ROTATION_DIM else jnp.float64  # public: the shape only
    lam, U = jnp.linalg.eigh(jnp.asarray(C, dtype))
    lam = jnp.maximum(lam, 0.0)
    floor = jnp.asarray(rotation_floor(n, d, sigma_w), dtype)  # > 0: τ_s > 0 for any N, d ≥ 1
    w = jax.lax.rsqrt(lam + floor)
    R = (U * (w / jnp.max(w))) @ U.T
    return jnp.asarray(R, jnp.float32)


#: From this dimension on, :func:`release_rotation` decomposes the noised second moment in float32 (post-processing
#: only): there the (d, d) eigendecomposition is most of a fit's time; below, float64 costs little and keeps a map
#: that two compiled programs of the same release round alike.
FLOAT32_ROTATION_DIM = 1024


#: One-sided z-score of the curvature bound (the true top eigenvalue exceeds it with probability ≈ 1.3e-3).
CURVATURE_Z = 3.0


def curvature_sensitivity(n: float, dim: int) -> float:
    """Δ of the *computed* top eigenvalue of a (d, d) float64 sum of ``n`` unit rank-one terms: 1 in exact
    arithmetic, plus twice the backward error of a symmetric eigensolver (‖E‖ ≤ p(d)·u·‖M‖ with ‖M‖ ≤ N;
    p(d) = 8d is generous for LAPACK's and cuSOLVER's syevd), so the bound holds for the eigenvalue as computed."""
    return 1.0 + 2.0 * 8.0 * dim * 2.0**-53 * n


def curvature_bound(noisy_top, n, dim: int, noise_std):
    """Upper confidence bound on the top eigenvalue of the rows' second moment from the released top eigenvalue
    of their sum: ``(noisy + CURVATURE_Z·std)/N``, within [1/d, 1] (unit rows: the eigenvalues sum to ≤ 1)."""
    return jnp.clip((noisy_top + CURVATURE_Z * noise_std) / n, 1.0 / dim, 1.0)


def release_curvature(M, n, key, sigma_c, noisy=None) -> jax.Array:
    """:func:`curvature_bound` of ``M`` (:func:`second_moment_sum` of the training rows) released with noise
    N(0, (σ_c·Δ)²) on its top eigenvalue (``GaussianDpEvent(σ_c)``).  ``noisy``: the already noised eigenvalue."""
    d = M.shape[0]
    std = sigma_c * curvature_sensitivity(n, d)
    if noisy is None:
        noisy = top_eigenvalue(M) + noise.gaussian(key, (), std)
    return jnp.asarray(curvature_bound(jnp.asarray(noisy, jnp.float64), n, d, std), jnp.float32)


def top_eigenvalue(M) -> jax.Array:
    """The largest eigenvalue of the symmetric float64 sum ``M`` (what the curvature release noises)."""
    return jnp.linalg.eigvalsh(M)[-1]


def standardized(Z, shift, scale):
    """Standardized rows ``normalize((z − shift)·scale)`` (unit norm; a zero row stays zero)."""
    Z = jnp.asarray(Z, jnp.float32)
    return preprocess.normalize_rows((Z - shift) * scale)


def apply(Z, s: Scaling, norm: float = 1.0):
    """The stage's public map on centered rows ``Z`` (n, d): standardize, whiten, rows at norm ``norm``."""
    B = standardized(Z, s.shift, s.scale)
    if s.rotate is not None:
        B = preprocess.normalize_rows(B @ s.rotate)
    return B * norm
