"""The row-norm release (:mod:`privlin.radius`): a noisy histogram of ⌊log₂‖x‖⌋, from which the rows' radial
coordinate is measured.  One row moves one count by 1: sensitivity 1."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from .. import radius as _radius
from .base import Release

__all__ = ["Radius", "RADIUS"]


@dataclasses.dataclass(frozen=True)
class Radius(Release):
    """log₂ R of a typical row norm; later rows gain the coordinate ln(‖x‖/R) (:func:`privlin.radius.embed`)."""

    name = "radius"
    generic = True
    adds_dims = 1

    def init(self, dim):
        return jnp.zeros(_radius.BINS, jnp.int32)

    def block_sum(self, total, X, mask, n):
        return total + _radius.norm_counts(X, mask)

    def release(self, total, n, key, sigma, noisy=None):
        return _radius.release_log_scale(total, key, sigma, noisy)

    def note(self, plan, sigma, value):
        return None if value is None else f"radial coordinate around the released row norm 2^{float(value):g}"


RADIUS = Radius()
