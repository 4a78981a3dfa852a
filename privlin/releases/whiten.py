"""The scaling stage's second release (:func:`.scaling.release_rotation`): the upper triangle of the
standardized rows' second moment (sensitivity 1: a unit row's outer product has Frobenius norm 1)."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from .. import noise
from . import scaling
from .base import Release, RowMap, model_rows, stage_keys
from .stage import scaling_stage

__all__ = ["Whitening", "WHITEN", "standardized_second_moment"]


def standardized_second_moment(total, X, mask, rows: RowMap, shift, scale, n, *, normalize):
    """``total`` + :func:`.scaling.second_moment_sum` of a chunk of rows centered by ``rows`` (at norm 1),
    then standardized by the released moments."""
    return total + scaling.second_moment_sum(
        scaling.standardized(model_rows(X, rows, 1.0, normalize), shift, scale), mask, n)


@dataclasses.dataclass(frozen=True)
class Whitening(Release):
    """The rotation (d', d'): later rows are whitened by it after the standardization (:func:`.scaling.apply`)."""

    name = "whiten"
    after = "scale"

    def share(self, facts):
        """Half the scaling stage's share where whitening resolves two directions (:func:`.stage.scaling_stage`)."""
        return scaling_stage(facts).get(self.name, 0.0)

    def compute(self, driver, ctx, key, sigma):
        """:func:`.scaling.release_rotation` of the standardized rows' second moment (the rows the moments'
        map gives before any rotation), with the second half of the scaling key."""
        shift, scale, _ = ctx.rows.scaling
        M = driver.total("scaling", jnp.zeros((ctx.model_dim,) * 2, jnp.float64), standardized_second_moment,
                         ctx.rows._replace(scaling=None), shift, scale, ctx.n, normalize=ctx.normalize)
        return scaling.release_rotation(M, ctx.n, noise.split(stage_keys(key)[1])[1], sigma,
                                        driver.noisy(self.name, lambda: scaling.upper(M)))

    def map_rows(self, rows, value):
        """Later rows are whitened by it after the standardization."""
        return rows._replace(scaling=rows.scaling._replace(rotate=value))


WHITEN = Whitening()
