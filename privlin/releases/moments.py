"""The scaling stage's first release (:func:`.scaling.release_moments`): per-dimension sums of z and z⊙z
of the centered unit rows, released together (L2 sensitivity √2)."""
from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp

from .. import noise
from . import scaling
from .base import Release, RowMap, model_rows, stage_keys
from .stage import scaling_stage

__all__ = ["Moments", "MOMENTS", "moment_sums"]


def moment_sums(total, X, mask, rows: RowMap, n, *, normalize):
    """``total`` + :func:`.scaling.moment_sums` of a chunk of rows centered by ``rows`` (at norm 1)."""
    return total + scaling.moment_sums(model_rows(X, rows, 1.0, normalize), mask, n)


@dataclasses.dataclass(frozen=True)
class Moments(Release):
    """``(shift, scale)``: later rows are standardized by them (:func:`.scaling.apply`)."""

    name = "scale"
    after = "center"

    def share(self, facts):
        """Its share of the scaling stage where the moments resolve (:func:`.stage.scaling_stage`)."""
        return scaling_stage(facts).get(self.name, 0.0)

    def secure(self, plan, sigma):
        return math.sqrt(2.0) * sigma, math.sqrt(2.0), float(plan.n)

    def compute(self, driver, ctx, key, sigma):
        """:func:`.scaling.release_moments` of the centered unit rows' sums, with the first half of the
        scaling key (the whitening's is the second); on rows in a public subspace (:mod:`.project`), whose
        coordinates were fitted to these rows, every variance floored at the sample's spread
        (:func:`.scaling.sampling_floor`), as the whitening floors its eigenvalues."""
        sums = driver.total("scaling", jnp.zeros((2, ctx.model_dim), jnp.float64), moment_sums, ctx.row_map(), ctx.n,
                            normalize=ctx.normalize)
        fitted = None if ctx.rows.project is None else scaling.sampling_floor(ctx.n, ctx.model_dim)
        return scaling.release_moments(sums, ctx.n, noise.split(stage_keys(key)[1])[0], sigma,
                                       driver.noisy(self.name, sums), fitted)

    def map_rows(self, rows, value):
        """Later rows are standardized by ``(shift, scale)`` (no rotation yet)."""
        return rows._replace(scaling=scaling.Scaling(*value, None))


MOMENTS = Moments()
