"""The curvature release (:func:`privlin.scaling.release_curvature`): a noisy upper bound on the top eigenvalue of
the training rows' second moment, which lifts W's stability cap (:func:`privlin.plan.learning_rates`).
Sensitivity :func:`privlin.scaling.curvature_sensitivity` (the eigensolver's error included)."""
from __future__ import annotations

import dataclasses

from .. import scaling
from .base import Release

__all__ = ["Curvature", "CURVATURE"]


@dataclasses.dataclass(frozen=True)
class Curvature(Release):
    name = "curvature"

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
