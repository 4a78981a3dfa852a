"""PRNG keys and Gaussian noise: the one place privlin draws privacy noise.

Why one place: a privacy guarantee is only as good as its noise.  Every
mechanism asks :func:`gaussian` for noise with an explicit key, so fresh noise
per step, per class and per statistic is a matter of splitting keys, and an
audit can swap the generator here.

Keys come from :func:`make_key`: a user-given ``random_state`` gives a
reproducible key (``seeded=True`` in the privacy report: anyone who knows the
seed can subtract the noise); ``None`` seeds JAX's counter-based generator from
the operating system's cryptographic entropy source (:mod:`secrets`).
"""
from __future__ import annotations

import secrets
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["KeyInfo", "make_key", "gaussian", "split_named"]


class KeyInfo(NamedTuple):
    """A PRNG key and whether it came from a user-given seed."""

    key: jax.Array
    seeded: bool


def make_key(random_state=None) -> KeyInfo:
    """A JAX PRNG key from ``random_state``.

    Parameters
    ----------
    random_state : None, int, numpy.random.Generator, numpy.random.RandomState or jax key
        ``None``: 64 bits from :func:`secrets.randbits` (OS CSPRNG), ``seeded=False``.
        An int, a NumPy generator (one draw from it) or a JAX key: reproducible, ``seeded=True``.

    Returns
    -------
    KeyInfo
    """
    if random_state is None:
        return KeyInfo(jax.random.key(secrets.randbits(63)), False)
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be >= 0, got {random_state}")
        return KeyInfo(jax.random.key(int(random_state) % (2**63)), True)
    if isinstance(random_state, np.random.Generator):
        return KeyInfo(jax.random.key(int(random_state.integers(0, 2**63 - 1))), True)
    if isinstance(random_state, np.random.RandomState):
        return KeyInfo(jax.random.key(int(random_state.randint(0, 2**31 - 1))), True)
    if isinstance(random_state, jax.Array):
        if jnp.issubdtype(random_state.dtype, jax.dtypes.prng_key):
            return KeyInfo(random_state, True)
        return KeyInfo(jax.random.wrap_key_data(random_state), True)
    raise ValueError(f"random_state must be None, an int, a NumPy generator or a JAX key, got {type(random_state)}")


def gaussian(key: jax.Array, shape, stddev, dtype=jnp.float32) -> jax.Array:
    """Gaussian noise N(0, stddev²) of ``shape`` from ``key`` (pure, jittable).

    Parameters
    ----------
    key : jax key
        Use a key once: split before each call.
    shape : tuple of int
    stddev : float or scalar array
        Standard deviation, typically ``sigma * clip``.
    """
    return stddev * jax.random.normal(key, shape, dtype)


def split_named(key: jax.Array, *names: str) -> dict:
    """Split ``key`` into one independent key per name (fresh noise per statistic)."""
    keys = jax.random.split(key, len(names))
    return {n: keys[i] for i, n in enumerate(names)}
