"""The private centering (:mod:`privlin.preprocess`): the mean of the normalized rows, in one Gaussian stage or
two (the second sums offsets from the first estimate, clipped to a public radius); the stages run at σ·√stages
each and compose to one Gaussian at σ.  Rows at norm C: sensitivity C."""
from __future__ import annotations

import dataclasses

from .. import preprocess
from .base import Release

__all__ = ["StagedMean", "Centering"]


@dataclasses.dataclass(frozen=True)
class StagedMean(Release):
    """A mean of rows at norm C released in ``parts`` Gaussians at σ·√parts each, which compose to exactly one at
    σ (GDP: 1/σ² adds); each sums rows of norm ≤ C, so its sensitivity is C and every entry is at most N·C."""

    parts: int = 1

    def events(self, sigma):
        return (preprocess.stage_sigma(sigma, self.parts),) * self.parts

    def secure(self, plan, sigma):
        return sigma * plan.clip, plan.clip, plan.n * plan.clip


@dataclasses.dataclass(frozen=True)
class Centering(StagedMean):
    """The centering, in ``stages`` Gaussian stages (:func:`privlin.preprocess.center_stages`)."""

    name = "center"

    @property
    def stages(self) -> int:
        return self.parts

    def note(self, plan, sigma, value):
        if self.stages != 2:
            return None
        r = float(preprocess.refine_radius(sigma, plan.n, plan.model_dim, plan.clip))
        return (f"centering released in 2 stages at σ {preprocess.stage_sigma(sigma, 2):.4g} each (they compose to "
                f"the one at σ {sigma:.4g}); the second sums offsets from the first estimate clipped to radius "
                f"{r:.3g}")
