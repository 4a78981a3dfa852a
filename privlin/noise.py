"""PRNG keys and privacy noise: the one place privlin draws random numbers for a mechanism.

Why one place: a guarantee is only as good as its noise.  Every mechanism asks this module for noise (or a
Poisson sample) with an explicit key, so fresh noise per step, per class and per statistic is a matter of
splitting keys, and an audit can swap the generator here.

Keys have 128 bits.  A JAX threefry key holds 64 (and with x64 off, ``jax.random.key(int)`` keeps only 32),
so a privlin key is a *pair* of independent threefry keys — a JAX key array of shape (2,) — and every draw
XORs the random bits of the two streams: recovering the noise needs both halves, 2¹²⁸ candidates.
:func:`make_key` fills both from 16 bytes of ``os.urandom`` unless the user seeds it (then every report says
``seeded``: whoever knows the seed can subtract the noise).  Threefry is counter-based and vmap-invariant, so
a setting trained inside a vmapped sweep draws exactly the noise it draws alone.

Under ``jax.distributed`` the key of process 0 is broadcast to the others, so every noise draw is made once,
for the global sum, and is the same on every process.  ``secure_mode`` does not use these keys at all: its noise comes from ``os.urandom`` directly
(:mod:`privlin.secure_noise`).
"""
from __future__ import annotations

import math
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["KeyInfo", "KEY_BITS", "make_key", "split", "split_named", "fold_in", "bits", "normal",
           "gaussian", "bernoulli", "bernoulli_threshold", "key_data", "sigma_float32",
           "noisy_counts"]

#: Entropy of an unseeded key, drawn from ``os.urandom``.
KEY_BITS = 128


class KeyInfo(NamedTuple):
    """A PRNG key and whether it came from a user-given seed."""

    key: jax.Array
    seeded: bool


def make_key(random_state=None) -> KeyInfo:
    """A privlin key from ``random_state``.

    Parameters
    ----------
    random_state : None, int, numpy.random.Generator, numpy.random.RandomState or JAX key
        ``None``: 128 bits from ``os.urandom``, ``seeded=False``.  An int, a NumPy generator (draws from it)
        or a JAX key (a single key, a pair, or their ``key_data``): reproducible, ``seeded=True``.

    Returns
    -------
    KeyInfo
    """
    if random_state is None:
        words = np.frombuffer(os.urandom(KEY_BITS // 8), dtype=np.uint32).reshape(2, 2)
        if jax.process_count() > 1:  # one noise draw for all processes: process 0's key, sent to the others
            from jax.experimental import multihost_utils

            words = np.asarray(multihost_utils.broadcast_one_to_all(words), np.uint32)
        return KeyInfo(jax.random.wrap_key_data(words), False)
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be >= 0, got {random_state}")
        return KeyInfo(jax.random.split(jax.random.key(int(random_state) % (2**63))), True)
    if isinstance(random_state, np.random.Generator):
        words = random_state.integers(0, 2**32, size=(2, 2), dtype=np.uint64).astype(np.uint32)
        return KeyInfo(jax.random.wrap_key_data(words), True)
    if isinstance(random_state, np.random.RandomState):
        words = random_state.randint(0, 2**32, size=(2, 2), dtype=np.uint64).astype(np.uint32)
        return KeyInfo(jax.random.wrap_key_data(words), True)
    if isinstance(random_state, (jax.Array, np.ndarray)):
        key = random_state
        if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.wrap_key_data(jnp.asarray(key, jnp.uint32))
        if key.shape == ():
            key = jax.random.split(key)
        if key.shape != (2,):
            raise ValueError(f"a privlin key is a pair of threefry keys; got a key array of shape {key.shape}")
        return KeyInfo(key, True)
    raise ValueError(f"random_state must be None, an int, a NumPy generator or a JAX key, got {type(random_state)}")


def key_data(keys) -> np.ndarray:
    """The raw uint32 words of keys (for a record that asked for them); ``make_key`` reads them back."""
    return np.asarray(jax.random.key_data(keys))


def split(key, n: int = 2) -> jax.Array:
    """``n`` independent keys (n, 2) from one (2,) key: each half split on its own."""
    return jnp.swapaxes(jax.vmap(lambda k: jax.random.split(k, n))(key), 0, 1)


def split_named(key, *names: str) -> dict:
    """Split ``key`` into one independent key per name (fresh noise per statistic)."""
    keys = split(key, len(names))
    return {n: keys[i] for i, n in enumerate(names)}


def fold_in(key, data) -> jax.Array:
    """The key for item ``data`` (an integer, may be traced) of a stream."""
    return jax.vmap(lambda k: jax.random.fold_in(k, data))(key)


def bits(key, shape, dtype=jnp.uint32) -> jax.Array:
    """Random bits (uint32, or uint64 under float64): the XOR of the two halves' streams (uniform and secret if
    either half is)."""
    shape = tuple(shape)
    return jax.random.bits(key[0], shape, dtype) ^ jax.random.bits(key[1], shape, dtype)


def normal(key, shape, dtype=jnp.float32) -> jax.Array:
    """Standard normals, from 52-bit uniforms in float64 (:func:`normal_from_bits`), cast to ``dtype``.  Traced
    under ``privlin.sensitivity.x64()``: without float64 it refuses (before drawing: uint64 bits would be
    truncated to uint32) rather than draw a truncated normal."""
    from .sensitivity import require_x64

    require_x64()
    return normal_from_bits(bits(key, shape, jnp.uint64)).astype(dtype)


#: The largest |z| :func:`normal` can draw: √2·erfinv(1 − 2⁻⁵²) = Φ⁻¹(1 − 2⁻⁵³).
NORMAL_TAIL = 8.2095


def normal_from_bits(b) -> jax.Array:
    """The float64 normal of uint64 random bits: u = (m + ½)·2⁻⁵¹ − 1, m = b >> 12 (the top 52 bits), lies in
    [−1 + 2⁻⁵², 1 − 2⁻⁵²] (exact in float64), and z = √2·erfinv(u).

    Why 52 bits: a normal is only as wide as its uniform's finest step.  From 23-bit float32 uniforms (what
    ``jax.random.normal`` draws in float32) no |z| exceeds 5.33, and a truncated Gaussian is not the Gaussian
    mechanism: a neighbour whose sum sits Δ away makes the outputs beyond the truncation impossible, an extra
    δ of about φ(5.33)·‖Δ‖₁/σ ≈ 3e-7·‖Δ‖₁/σ per release, which T steps of a d·k gradient can push past the δ
    claimed.  At 52 bits the tail is cut at 8.21σ, and that δ is below 1e-14·‖Δ‖₁/σ.  (One uint64 draw, not two
    uint32 ones: the same bits, and a third less XLA compile time in a sweep.)
    """
    from .sensitivity import require_x64

    require_x64()
    u = ((b >> 12).astype(jnp.float64) + 0.5) * (2.0**-51) - 1.0
    return jnp.sqrt(2.0) * jax.lax.erf_inv(u)


def gaussian(key, shape, stddev, dtype=jnp.float32) -> jax.Array:
    """Gaussian noise N(0, stddev²) of ``shape`` from ``key`` (pure, jittable).  Use a key once: split first."""
    return stddev * normal(key, shape, dtype)


def bernoulli(key, p: float, shape) -> jax.Array:
    """Bools, each True with probability :func:`bernoulli_threshold` ``(p)``/2³² ≤ ``p`` (a Poisson sample's
    membership draws): never above the rate the accountant was told, whose amplification grows with it.  ``p`` is
    the plan's Python float (static under jit), never a traced value."""
    t = bernoulli_threshold(p)
    if t >= 2**32:
        return jnp.ones(tuple(shape), bool)
    return bits(key, shape) < jnp.uint32(t)


def bernoulli_threshold(p: float) -> int:
    """⌊p·2³²⌋: uint32 bits below it occur with probability ⌊p·2³²⌋/2³² ∈ (p − 2⁻³², p] (a 2⁻²⁴ float32 grid
    rounds p *up*, by as much as 6e-8)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a probability is in [0, 1], got {p}")
    return math.floor(p * 2**32)


#: Relative margin :func:`sigma_float32` adds before rounding up: covers one later float32 product rounded to nearest
#: (relative error ≤ 2⁻²⁴) and the float64 rounding of the value given.
SIGMA_MARGIN = 2.0**-22


def sigma_float32(sigma: float) -> np.float32:
    """The float32 a compiled fit is given for a noise multiplier (or a ratio of two): the smallest float32
    ≥ ``sigma``·(1 + 2⁻²²).  Why: a float32 rounded to nearest is below σ half the time, and less noise than
    planned is an ε above the claim; the margin keeps one more float32 product (σ_ref × a release's ratio, σ × C)
    at or above the planned value, for at most 3·10⁻⁷ more noise."""
    sigma = float(sigma)
    if sigma == 0.0 or not math.isfinite(sigma):
        return np.float32(sigma)
    want = sigma * (1.0 + SIGMA_MARGIN)
    out = np.float32(want)
    if float(out) < want:
        out = np.nextafter(out, np.float32(np.inf))
    return out


def noisy_counts(counts, std: float, key, *, secure: bool = False, l2_sensitivity: float = 1.0,
                 bound: float | None = None) -> np.ndarray:
    """``counts`` (S,) each plus fresh N(0, std²) noise, float64 (S,), the counts exact (float32 has no odd integers
    past 2²⁴).

    ``secure=False``: privlin's float64 normal from ``key`` (:func:`privlin.noise.gaussian`): floating-point noise,
    whose output set can depend on the count (PRIVACY.md).  ``secure=True``: secure mode's exact release
    (:func:`privlin.secure_noise.secure_gaussian_release`: the discrete Gaussian from ``os.urandom`` on a
    power-of-two grid, ``key`` unused) of the integer counts, whose ``l2_sensitivity`` and public ``bound`` (the
    rows counted) choose the grid."""
    if secure:
        from . import secure_noise

        return secure_noise.secure_gaussian_release(np.asarray(counts, np.int64), std, l2_sensitivity, bound=bound)
    from .sensitivity import x64

    with x64():
        return np.asarray(jnp.asarray(counts, jnp.float64) + gaussian(key, (len(counts),), std, jnp.float64))
