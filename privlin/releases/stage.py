"""Which releases of the scaling stage a plan makes, decided together from public facts before calibration: the
moments, the whitening and the row norm (whose radial coordinate the stage weighs, so it is made only with the
moments, and the stage is decided at the dimension it gives).  Read by the three releases' :meth:`share`
(:mod:`.moments`, :mod:`.whiten`, :mod:`.radius`) and by the re-centering's (:mod:`.recenter`, made only with the
stage)."""
from __future__ import annotations

import math

from . import norms as _radius
from . import scaling
from ..defaults import RADIUS_SHARE
from .base import Facts, planned_sigma

__all__ = ["scaling_stage", "radius_pays"]


def radius_pays(f: Facts) -> bool:
    """Whether the row-norm release can find a typical norm (:func:`.norms.resolves`) at its share
    (:data:`~privlin.defaults.RADIUS_SHARE` of μ²), in the GDP view of the budget."""
    if math.isinf(f.mu):
        return True
    return _radius.resolves(f.n, planned_sigma(RADIUS_SHARE, f.mu, f.relation))


def scaling_stage(f: Facts) -> dict:
    """``{"radius": RADIUS_SHARE, "scale": s/2, "whiten": s/2}`` (s: the stage's share), without ``radius`` where
    it is not made, ``{"scale": s}`` where whitening cannot resolve two directions (or costs too much), ``{}``
    where not even the moments can, or where the stage is off (``scale`` False, or σ given).

    The GDP view of the budget (:func:`~privlin.releases.base.planned_sigma`): public facts only, the same for
    every accountant.  ``radial=True`` that the stage cannot have is refused.
    """
    if not (f.scale and f.epsilon is not None):
        if f.radial:
            raise ValueError("radial=True needs the scaling stage (it weighs the radial coordinate): scale=True "
                             "(or None) and epsilon given")
        return {}
    radial = radius_pays(f) if f.radial is None else bool(f.radial)
    stage = _moments_and_whitening(f, f.dim + int(radial))
    if radial and "scale" in stage:
        return {"radius": RADIUS_SHARE, **stage}
    if f.radial:
        raise ValueError("radial=True needs the scaling stage, which this budget cannot resolve at this N")
    return stage


def _moments_and_whitening(f: Facts, dim: int) -> dict:
    share, n = f.scale_share, f.n
    if math.isinf(f.mu):
        whiten = scaling.whitening_resolves(n, dim, 0.0)
        return {"scale": share / 2, "whiten": share / 2} if whiten else {"scale": share}

    def sigma_of(s):
        return planned_sigma(s, f.mu, f.relation)

    if scaling.whitening_resolves(n, dim, sigma_of(share / 2)) and scaling.moments_resolve(n, dim, sigma_of(share / 2)):
        return {"scale": share / 2, "whiten": share / 2}
    if scaling.moments_resolve(n, dim, sigma_of(share)):
        return {"scale": share}
    return {}
