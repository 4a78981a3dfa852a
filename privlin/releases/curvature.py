"""The curvature release (:func:`privlin.scaling.release_curvature`): a noisy upper bound on the top eigenvalue of
the training rows' second moment, which lifts W's stability cap (:func:`privlin.plan.learning_rates`).
Sensitivity :func:`privlin.scaling.curvature_sensitivity` (the eigensolver's error included)."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from .. import scaling
from .base import Release, release_key

__all__ = ["Curvature", "CURVATURE", "second_moment"]


def second_moment(total, Z, mask, n):
    """``total`` + :func:`privlin.scaling.second_moment_sum` of a chunk of (mapped) rows."""
    return total + scaling.second_moment_sum(Z, mask, n)


@dataclasses.dataclass(frozen=True)
class Curvature(Release):
    """The bound lifts W's learning rate (:func:`privlin.plan.learning_rates`); the rows are unchanged."""

    name = "curvature"

    def compute(self, driver, ctx, key, sigma):
        """:func:`privlin.scaling.release_curvature` of the training rows' second moment; secure mode noises its
        top eigenvalue on the host."""
        rows = driver.mapped(ctx.row_map(), ctx.clip, ctx.normalize)  # the training rows
        M = rows.total("curvature", jnp.zeros((ctx.model_dim,) * 2, jnp.float64), second_moment, ctx.n)
        noisy = driver.noisy(self.name, lambda: [scaling.top_eigenvalue(M)])
        return scaling.release_curvature(M, ctx.n, release_key(key, self.name), sigma,
                                         None if noisy is None else noisy[0])

    def secure(self, plan, sigma):
        sens = scaling.curvature_sensitivity(plan.n, plan.model_dim)
        return sigma * sens, sens, float(plan.n)

    def note(self, plan, sigma, value):
        if value is None:
            return None
        lr_w, lr_b = plan.learning_rates_after(value)
        return (f"learning rate from the released curvature bound {float(value):.3g}: weights {lr_w:.4g}, "
                f"intercept {lr_b:.4g}")


CURVATURE = Curvature()
