"""A toy release written outside privlin, as a user would add one: a noisy count of the rows whose first
coordinate is positive, read from the rows as given.  One row moves the count by at most 1 (zero-out neighbours:
L2 sensitivity 1), so its Gaussian noise is σ and secure mode's table is (σ, 1, N).  Registering it is one line,
``privlin.releases.register(POSITIVE)`` (tests/test_toy_release.py)."""
import dataclasses
import math

import jax.numpy as jnp

from privlin import noise
from privlin.releases import Release

SHARE = 0.02


@dataclasses.dataclass(frozen=True)
class PositiveCount(Release):
    """How many rows have a positive first coordinate, with Gaussian noise of std σ; asks for :data:`SHARE` of μ²
    wherever there is a budget to split (not where the noise multiplier is given)."""

    name = "positive"

    def share(self, facts):
        return 0.0 if math.isnan(facts.mu) else SHARE

    def init(self, dim):
        return jnp.zeros((1,), jnp.int32)

    def block_sum(self, total, X, mask, n):
        return total + jnp.sum((X[:, 0] > 0) & (jnp.asarray(mask) > 0)).astype(jnp.int32)

    def release(self, total, n, key, sigma, noisy=None):
        if noisy is None:  # the exact count in float64 (exact below 2^53), then its noise
            noisy = jnp.asarray(total, jnp.float64) + noise.gaussian(key, (1,), sigma, jnp.float64)
        return jnp.asarray(noisy, jnp.float32)

    def note(self, plan, sigma, value):
        return None if value is None else f"rows with a positive first coordinate: {float(value[0]):.1f} (noisy)"


POSITIVE = PositiveCount()
