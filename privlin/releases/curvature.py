"""The curvature release (:func:`privlin.scaling.release_curvature`): a noisy upper bound on the top eigenvalue of
the training rows' second moment, which lifts W's stability cap (:func:`privlin.plan.learning_rates`).
Sensitivity :func:`privlin.scaling.curvature_sensitivity` (the eigensolver's error included)."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from .. import scaling
from .base import Release, RowMap, model_rows, release_key

__all__ = ["Curvature", "CURVATURE", "model_second_moment"]


def model_second_moment(total, X, mask, rows: RowMap, n, *, clip, normalize):
    """``total`` + :func:`privlin.scaling.second_moment_sum` of a chunk of rows as the model sees them."""
    return total + scaling.second_moment_sum(model_rows(X, rows, clip, normalize), mask, n)


@dataclasses.dataclass(frozen=True)
class Curvature(Release):
    """The bound lifts W's learning rate (:func:`privlin.plan.learning_rates`); the rows are unchanged."""

    name = "curvature"

    def compute(self, driver, ctx, key, sigma):
        """:func:`privlin.scaling.release_curvature` of the training rows' second moment; secure mode noises its
        top eigenvalue on the host."""
        M = driver.total("curvature", jnp.zeros((ctx.model_dim,) * 2, jnp.float64), model_second_moment,
                         ctx.row_map(), ctx.n, clip=ctx.clip, normalize=ctx.normalize)
        noisy = driver.noisy(self.name, lambda: [scaling.top_eigenvalue(M)])
        return scaling.release_curvature(M, ctx.n, release_key(key, self.name), sigma,
                                         None if noisy is None else noisy[0])

    def use(self, ctx, value):
        return ctx._replace(curvature=value)

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
