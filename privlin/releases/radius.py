"""The row-norm release (:mod:`privlin.radius`): a noisy histogram of ⌊log₂‖x‖⌋, from which the rows' radial
coordinate is measured.  One row moves one count by 1: sensitivity 1."""
from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp

from .. import accounting
from .. import radius as _radius
from ..defaults import RADIUS_SHARE
from .base import Release, planned_sigma

__all__ = ["Radius", "RADIUS"]


@dataclasses.dataclass(frozen=True)
class Radius(Release):
    """log₂ R of a typical row norm; later rows gain the coordinate ln(‖x‖/R) (:func:`privlin.radius.embed`)."""

    name = "radius"
    adds_dims = 1

    def init(self, dim):
        return jnp.zeros(_radius.BINS, jnp.int32)

    def block_sum(self, total, X, mask, n):
        return total + _radius.norm_counts(X, mask)

    def release(self, total, n, key, sigma, noisy=None):
        return _radius.release_log_scale(total, key, sigma, noisy)

    def map_rows(self, rows, value):
        """Later rows gain their radial coordinate around 2^value."""
        return rows._replace(log_scale=value)

    def note(self, plan, sigma, value):
        return None if value is None else f"radial coordinate around the released row norm 2^{float(value):g}"

    def pays(self, epsilon: float, delta: float, n: int, relation) -> bool:
        """Whether to buy the release (:data:`~privlin.defaults.RADIUS_SHARE` of μ²): where it can find a typical
        norm (:func:`privlin.radius.resolves`), in the GDP view of the budget before calibration."""
        if math.isinf(epsilon):
            return True
        return _radius.resolves(n, planned_sigma(RADIUS_SHARE, accounting.gdp_mu_for(epsilon, delta), relation))


RADIUS = Radius()
