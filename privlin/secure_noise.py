"""secure_mode noise: OS-CSPRNG randomness and a Gaussian that floating point cannot betray.

Why
---
``x + N(0, s²)`` computed in floating point leaks ``x``: the set of doubles a
float sampler can return, and where they land after the addition, depend on
``x`` (Mironov 2012 for Laplace; Jin et al. 2022 for Gaussian samplers). And a
pseudo-random generator whose seed can be guessed gives no privacy at all.

What secure mode does instead
-----------------------------
1. Randomness comes from the operating system's CSPRNG (``os.urandom``:
   getrandom/ChaCha20 on Linux), not from a seeded generator.
2. The statistic is rounded to a grid ``γ`` (a power of two, ~2⁻³⁰ of the noise
   scale) and integer noise ``k ~ N_Z(0, (s/γ)²)`` from the discrete Gaussian
   (Canonne, Kamath & Steinke 2020, Algorithm 3: discrete-Laplace proposals,
   rejection) is added on the grid. Every released value is an exact multiple
   of ``γ`` computed without rounding, so the output set does not depend on the
   private input; converting to float32 afterwards is post-processing.
3. Rounding moves the statistic by at most ``γ·√d/2``, so two neighbours differ
   by at most ``Δ + γ√d`` instead of ``Δ``; the noise scale is multiplied by
   ``1 + γ√d/Δ`` (≈ 1 + 10⁻⁶) so the accounted σ is kept. The discrete
   Gaussian on a fine grid has the same concentrated-DP guarantee as the
   continuous one (CKS 2020, Thm 4).

The rejection test uses float64 ``exp``; its error (≤ 2⁻⁵² relative per
draw) changes the sampled distribution by a total-variation distance far below
any δ in use, and, unlike the leak above, does not depend on the data.

Cost: BENCHMARKS.md, "Privacy: audits and secure_mode noise" (``benchmarks/bench_audit.py``): many times a
plain Gaussian draw per value, small next to one data pass.
"""
from __future__ import annotations

import math
import os

import numpy as np

__all__ = [
    "uniform",
    "discrete_gaussian",
    "discrete_laplace",
    "grid_for",
    "secure_gaussian_release",
    "SecureRelease",
]

_TWO_M53 = 2.0**-53
# Grid resolution relative to the noise scale: γ ≈ s · 2^-30.
_GRID_BITS = 30


def uniform(n: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """``n`` uniforms in (0, 1], float64 with 53 random bits.

    Parameters
    ----------
    n : int
    rng : numpy.random.Generator, optional
        For reproducible tests only. ``None`` (secure mode) reads ``os.urandom``.
    """
    if rng is not None:
        return 1.0 - rng.random(n)  # [0,1) -> (0,1]
    words = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
    return ((words >> np.uint64(11)).astype(np.float64) + 1.0) * _TWO_M53


def _geometric0(n: int, log_q: float, rng) -> np.ndarray:
    """Geometric on {0, 1, ...} with P(k) ∝ q^k, by inversion: floor(log U / log q)."""
    u = uniform(n, rng)
    return np.floor(np.log(u) / log_q).astype(np.int64)


def discrete_laplace(n: int, t: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """``n`` draws with P(y) ∝ exp(−|y|/t) on the integers (difference of two geometrics)."""
    log_q = -1.0 / t
    return _geometric0(n, log_q, rng) - _geometric0(n, log_q, rng)


def discrete_gaussian(
    shape, sigma: float, rng: np.random.Generator | None = None, *, max_rounds: int = 200
) -> np.ndarray:
    """Integers with P(k) ∝ exp(−k²/(2σ²)) (Canonne, Kamath & Steinke 2020).

    Proposal: discrete Laplace with scale ``t = ⌊σ⌋ + 1``; accept ``y`` with
    probability ``exp(−(|y| − σ²/t)² / (2σ²))``; draws are vectorized and the
    rejected ones redrawn (acceptance ≈ 0.6 for large σ).

    Parameters
    ----------
    shape : int or tuple of int
    sigma : float
        Scale in grid units, > 0 and < 2⁵⁰ (int64 output).
    rng : numpy.random.Generator, optional
        ``None`` uses the OS CSPRNG; a generator only for reproducible tests.

    Returns
    -------
    numpy.ndarray of int64, shape ``shape``
    """
    sigma = float(sigma)
    if not (0 < sigma < 2.0**50) or not math.isfinite(sigma):
        raise ValueError(f"discrete_gaussian needs 0 < sigma < 2**50, got {sigma}")
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    n = int(np.prod(shape, dtype=np.int64))
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    t = math.floor(sigma) + 1
    s2 = sigma * sigma
    for _ in range(max_rounds):
        if todo.size == 0:
            return out.reshape(shape)
        m = todo.size
        # draw ~1.8x what is missing: one round usually finishes
        k = int(m * 1.8) + 16
        y = discrete_laplace(k, t, rng)
        accept = uniform(k, rng) <= np.exp(-((np.abs(y) - s2 / t) ** 2) / (2.0 * s2))
        y = y[accept][:m]
        out[todo[: y.size]] = y
        todo = todo[y.size:]
    raise RuntimeError("discrete_gaussian: rejection sampling did not finish")  # pragma: no cover


#: The discrete Gaussian must have at least this many grid points per standard deviation.
_MIN_RESOLUTION = 2.0**8


def grid_for(std: float, bound: float = 0.0) -> float:
    """The grid γ for noise of standard deviation ``std``: a power of two ≈ std·2⁻³⁰, coarser if needed so that
    any statistic of magnitude ≤ ``bound`` (a public bound, e.g. N·C) plus the noise stays an integer < 2⁵²
    of grid steps."""
    if not (std > 0 and math.isfinite(std)):
        raise ValueError(f"noise std must be positive and finite, got {std}")
    fine = math.floor(math.log2(std)) - _GRID_BITS
    coarse = math.ceil(math.log2((float(bound) + 64.0 * std) * 2.0**-51))
    return 2.0 ** max(fine, coarse)


def check_plan(std: float, bound: float) -> float:
    """Refuse, before anything is read, a release whose grid would be too coarse for its noise; returns γ."""
    gamma = grid_for(std, bound)
    if std / gamma < _MIN_RESOLUTION:
        raise ValueError(f"secure_mode cannot release a statistic bounded by {bound:.3g} with noise std {std:.3g}: "
                         f"its exact grid would be coarser than std/{_MIN_RESOLUTION:g}")
    return gamma


class SecureRelease:
    """What :func:`secure_gaussian_release` did, for the privacy report.

    Attributes
    ----------
    grid : float
        γ, the spacing of released values.
    std : float
        Standard deviation actually used, ``std_requested · inflation``.
    inflation : float
        ``1 + γ√d / sensitivity`` (covers the rounding of the statistic).
    """

    def __init__(self, grid: float, std: float, inflation: float):
        self.grid, self.std, self.inflation = grid, std, inflation

    def as_dict(self) -> dict:
        return {"noise": "discrete_gaussian", "randomness": "os.urandom", "grid": self.grid,
                "std": self.std, "inflation": self.inflation}


def secure_gaussian_release(
    value,
    std: float,
    sensitivity: float,
    rng: np.random.Generator | None = None,
    *,
    bound: float | None = None,
    return_info: bool = False,
):
    """Release ``value + noise`` with discrete Gaussian noise on a power-of-two grid.

    Parameters
    ----------
    value : array_like, shape (...)
        The clipped statistic (e.g. per-class gradient sums, shape (K, D)).
    std : float
        Standard deviation the accountant assumed (``σ · sensitivity``).
    sensitivity : float
        L2 sensitivity of ``value`` under the neighbouring relation (e.g. ``C``).
    bound : float, optional
        A public bound on every |value| entry (N·C for a sum of N clipped contributions): the grid is chosen
        from it, so the release can never fail on the data (:func:`check_plan` refuses impossible plans first).
        None: the grid is chosen from the noise scale alone and a too-large value is refused.
    rng : numpy.random.Generator, optional
        ``None`` (secure) draws from the OS CSPRNG; a generator is for tests.
    return_info : bool
        Also return a :class:`SecureRelease`.

    Returns
    -------
    numpy.ndarray of float64, shape of ``value``
        Exact multiples of the grid γ.
    """
    x = np.asarray(value, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError("secure_gaussian_release: the statistic has non-finite entries")
    if not sensitivity > 0:
        raise ValueError(f"sensitivity must be > 0, got {sensitivity}")
    gamma = grid_for(std, bound or 0.0)
    inflation = 1.0 + gamma * math.sqrt(max(x.size, 1)) / sensitivity
    std_used = std * inflation
    snapped = np.rint(x / gamma)
    if snapped.size and np.max(np.abs(snapped)) + 64 * std_used / gamma >= 2.0**52:  # unreachable within `bound`
        raise ValueError(
            "secure_gaussian_release: the statistic is too large for an exact grid at this noise scale "
            f"(max |value| = {np.max(np.abs(x)):.3g}, grid {gamma:.3g})"
        )
    k = discrete_gaussian(x.shape, std_used / gamma, rng)
    out = (snapped + k.astype(np.float64)) * gamma  # exact: integers < 2^52 times a power of two
    if return_info:
        return out, SecureRelease(gamma, std_used, inflation)
    return out
