"""The scaling stage's first release (:func:`privlin.scaling.release_moments`): per-dimension sums of z and z⊙z
of the centered unit rows, released together (L2 sensitivity √2)."""
from __future__ import annotations

import dataclasses
import math

from .. import accounting, scaling
from .base import Release, planned_sigma

__all__ = ["Moments", "MOMENTS", "scaling_stage"]


@dataclasses.dataclass(frozen=True)
class Moments(Release):
    name = "scale"

    def secure(self, plan, sigma):
        return math.sqrt(2.0) * sigma, math.sqrt(2.0), float(plan.n)


MOMENTS = Moments()


def scaling_stage(epsilon, delta, share, n, dim, relation) -> dict:
    """The scaling stage's releases and their shares of μ²: ``{"scale": s/2, "whiten": s/2}``, ``{"scale": s}``
    (whitening cannot resolve two directions, or costs too much) or ``{}`` (not even the moments can).

    Decided before calibration from the GDP view of the budget (:func:`~privlin.releases.base.planned_sigma`):
    public facts only, the same for every accountant.
    """
    if math.isinf(epsilon):
        return {"scale": share / 2, "whiten": share / 2} if scaling.whitening_resolves(n, dim, 0.0) else {"scale": share}
    mu = accounting.gdp_mu_for(epsilon, delta)

    def sigma_of(s):
        return planned_sigma(s, mu, relation)

    if scaling.whitening_resolves(n, dim, sigma_of(share / 2)) and scaling.moments_resolve(n, dim, sigma_of(share / 2)):
        return {"scale": share / 2, "whiten": share / 2}
    if scaling.moments_resolve(n, dim, sigma_of(share)):
        return {"scale": share}
    return {}
