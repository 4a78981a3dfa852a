"""The re-centering rounds before the centering (:func:`privlin.preprocess.round_means`): each releases the mean
of the current rows (at σ·√rounds; they compose to one Gaussian at σ), subtracts it and normalizes again.  Rows
at norm C: sensitivity C.  Never in secure mode (:func:`privlin.plan.make_plan`)."""
from __future__ import annotations

import dataclasses

from .. import preprocess
from .base import Release

__all__ = ["Recentering"]


@dataclasses.dataclass(frozen=True)
class Recentering(Release):
    """``rounds`` re-centering rounds (:data:`privlin.preprocess.RECENTER_ROUNDS`)."""

    rounds: int = preprocess.RECENTER_ROUNDS
    name = "recenter"

    def events(self, sigma):
        return (preprocess.stage_sigma(sigma, self.rounds),) * self.rounds

    def secure(self, plan, sigma):
        return sigma * plan.clip, plan.clip, plan.n * plan.clip

    def note(self, plan, sigma, value):
        return (f"re-centered first in {self.rounds} rounds at σ {preprocess.stage_sigma(sigma, self.rounds):.4g} "
                f"each (they compose to the one at σ {sigma:.4g}): each subtracts the released mean of the current "
                f"rows and normalizes them again")
