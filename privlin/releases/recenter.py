"""The re-centering rounds before the centering (:func:`.preprocess.round_means`): each releases the mean
of the current rows (at σ·√rounds; they compose to one Gaussian at σ), subtracts it and normalizes again.  Rows
at norm C: sensitivity C.  Never in secure mode (:func:`privlin.plan.make_plan`)."""
from __future__ import annotations

import dataclasses

import math

import jax.numpy as jnp

from . import preprocess
from ..defaults import RECENTER_SHARE
from .base import planned_sigma, recenter_keys
from .center import StagedMean, rows_total
from .stage import scaling_stage

__all__ = ["Recentering"]


@dataclasses.dataclass(frozen=True)
class Recentering(StagedMean):
    """``rounds`` re-centering rounds (:data:`.preprocess.RECENTER_ROUNDS`)."""

    parts: int = preprocess.RECENTER_ROUNDS
    name = "recenter"
    after = "radius"
    folded_into = "center"  # its means lead the centering's chain (Centering.use)

    def share(self, facts):
        """:data:`~privlin.defaults.RECENTER_SHARE` with the scaling stage, out of secure mode, where the
        centering's expected error at its share is at least a tenth of the row norm
        (:func:`.preprocess.recenter_rounds`); ``recenter=True`` asks for it where it can run."""
        f = facts
        made = f.recenter
        if made and (not f.center or f.sigma_given or f.secure_mode):
            raise ValueError("recenter=True needs center=True and epsilon (its noise is calibrated from it), and is "
                             "not made in secure_mode")
        if made is None:
            made = ("scale" in scaling_stage(f) and not f.secure_mode and not math.isinf(f.mu)
                    and preprocess.recenter_rounds(planned_sigma(f.center_share, f.mu, f.relation), f.n, f.model_dim,
                                                   f.clip) > 0)
        return RECENTER_SHARE if made else 0.0

    @property
    def rounds(self) -> int:
        return self.parts

    def compute(self, driver, ctx, key, sigma):
        """:func:`.preprocess.round_means`: one exact row sum per round, of the rows as the earlier rounds
        left them.  (Not made in secure mode: make_plan.)  In a program shared with plans that make no rounds
        (``ctx.recenter``, traced: their ratio −1), theirs are zeros, which later rows pass over (:meth:`use`)."""
        means = preprocess.round_means(lambda rounds: rows_total(driver, ctx, "re-centering", rounds), ctx.n,
                                       recenter_keys(key, self.rounds), sigma, self.rounds, ctx.clip)
        return means if ctx.recenter is None else jnp.where(ctx.recenter >= 0, means, 0.0)

    def use(self, ctx, value):
        """As :meth:`Release.use`; where ``ctx.recenter`` is traced, later rows skip the means of a plan without
        rounds (:class:`.preprocess.RowMap`)."""
        ctx = super().use(ctx, value)
        if ctx.recenter is None:
            return ctx
        return ctx._replace(rows=ctx.rows._replace(skip=jnp.where(ctx.recenter >= 0, 0, self.rounds)))

    def map_rows(self, rows, value):
        """Later rows are re-centered by the rounds' means (R, d'), each followed by a normalization."""
        return rows._replace(mean=value)

    def note(self, plan, sigma, value):
        return (f"re-centered first in {self.rounds} rounds at σ {preprocess.stage_sigma(sigma, self.rounds):.4g} "
                f"each (they compose to the one at σ {sigma:.4g}): each subtracts the released mean of the current "
                f"rows and normalizes them again")
