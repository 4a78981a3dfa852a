"""The curvature release (:func:`.scaling.release_curvature`): a noisy upper bound on the top eigenvalue of
the training rows' second moment, which lifts W's stability cap (:func:`privlin.plan.learning_rates`).
Sensitivity :func:`.scaling.curvature_sensitivity` (the eigensolver's error included)."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

import math

from . import scaling
from ..defaults import CURVATURE_FLATNESS, CURVATURE_GAIN, CURVATURE_SHARE
from .base import Release, planned_sigma, release_key
from .rates import joint_cap, noise_rate

__all__ = ["Curvature", "CURVATURE", "second_moment", "curvature_pays"]


def second_moment(total, Z, mask, n):
    """``total`` + :func:`.scaling.second_moment_sum` of a chunk of (mapped) rows."""
    return total + scaling.second_moment_sum(Z, mask, n)


def curvature_pays(f) -> bool:
    """Whether to buy the release (:data:`CURVATURE_SHARE` of μ²): its pass is affordable (the bounds of
    whitening), the noise term is at least :data:`~privlin.defaults.CURVATURE_GAIN` × the stability cap (so a
    flatter curvature could lift the rate by that much), and the release can show a curvature at least
    :data:`~privlin.defaults.CURVATURE_FLATNESS` × below the worst case.  Decided, like the scaling stage, from the
    GDP view of the budget before calibration, after the releases before it (``f.chosen``): public facts only
    (BENCHMARKS.md, "curvature")."""
    n, dim = f.n, f.model_dim
    if not scaling.second_moment_affordable(n, dim):
        return False
    if math.isinf(f.mu):
        return True
    rest = 1.0 - sum(f.shares.values()) - CURVATURE_SHARE
    if rest <= 0:
        return False
    sigma = planned_sigma(rest, f.mu, f.relation) * f.q * math.sqrt(f.steps)  # T steps sharing the rest of μ²
    rate = noise_rate(sigma, f.q * n, steps=f.steps, momentum=f.momentum, clip=f.clip)
    if rate < CURVATURE_GAIN * joint_cap(f.momentum, f.clip, f.fit_intercept):
        return False
    std = planned_sigma(CURVATURE_SHARE, f.mu, f.relation) * scaling.curvature_sensitivity(n, dim)
    flattest = float(scaling.curvature_bound(n / dim, n, dim, std))  # the bound if the rows were isotropic
    return CURVATURE_FLATNESS * flattest < 1.0


@dataclasses.dataclass(frozen=True)
class Curvature(Release):
    """The bound lifts W's learning rate (:func:`privlin.plan.learning_rates`); the rows are unchanged."""

    name = "curvature"
    after = "whiten"

    def share(self, facts):
        """:data:`~privlin.defaults.CURVATURE_SHARE` with the sgd optimizer, centered rows and no rate given,
        where it pays (:func:`curvature_pays`)."""
        f = facts
        made = (f.center and f.epsilon is not None and not f.learning_rate_given and f.optimizer == "sgd"
                and curvature_pays(f))
        return CURVATURE_SHARE if made else 0.0

    def compute(self, driver, ctx, key, sigma):
        """:func:`.scaling.release_curvature` of the training rows' second moment; secure mode noises its
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
