"""The row-norm release (:mod:`.norms`): a noisy histogram of ⌊log₂‖x‖⌋, from which the rows' radial
coordinate is measured.  One row moves one count by 1: sensitivity 1."""
from __future__ import annotations

import dataclasses
import jax.numpy as jnp

from . import norms as _radius
from .base import Release
from .stage import scaling_stage

__all__ = ["Radius", "RADIUS"]


@dataclasses.dataclass(frozen=True)
class Radius(Release):
    """log₂ R of a typical row norm; later rows gain the coordinate ln(‖x‖/R) (:func:`.norms.embed`)."""

    name = "radius"
    adds_dims = 1
    after = None  # first: every later release reads the rows with their radial coordinate

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

    def share(self, facts):
        """:data:`~privlin.defaults.RADIUS_SHARE` where the scaling stage, decided with it, weighs the radial
        coordinate and the release can find a typical norm (:func:`.stage.scaling_stage`)."""
        return scaling_stage(facts).get(self.name, 0.0)


RADIUS = Radius()
