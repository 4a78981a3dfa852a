"""The private centering (:mod:`.preprocess`): the mean of the normalized rows, in one Gaussian stage or
two (the second sums offsets from the first estimate, clipped to a public radius); the stages run at σ·√stages
each and compose to one Gaussian at σ.  Rows at norm C: sensitivity C."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from . import preprocess
from .base import Release, release_key, stage_keys

__all__ = ["StagedMean", "Centering", "row_sum"]


def row_sum(total, X, mask, n, log_scale, rounds, skip, *, clip):
    """``total`` + :func:`.preprocess.row_sum` of a chunk: the rows at norm ``clip`` (with their radial
    coordinate under ``log_scale``, re-centered by the ``rounds`` released so far, less the ``skip`` first)."""
    return total + preprocess.row_sum(X, mask, clip, n, log_scale, rounds, skip)


def offset_sum(total, X, mask, first, radius, n, log_scale, rounds, skip, *, clip):
    """``total`` + :func:`.preprocess.offset_sum` of a chunk: the refining stage's clipped offsets."""
    return total + preprocess.offset_sum(X, mask, first, radius, n, clip, log_scale, rounds, skip)


def rows_total(driver, ctx, what, rounds):
    """The exact sum of the rows at norm C, as the re-centering ``rounds`` (None: none yet) leave them."""
    return driver.total(what, jnp.zeros(ctx.model_dim, jnp.float64), row_sum, ctx.n, ctx.rows.log_scale, rounds,
                        None if rounds is None else ctx.rows.skip, clip=ctx.clip)


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
    """The centering, in ``stages`` Gaussian stages (:func:`.preprocess.center_stages`)."""

    name = "center"
    after = "recenter"
    sigma_param = "center_noise_multiplier"

    @property
    def stages(self) -> int:
        return self.parts

    def share(self, facts):
        """``center_share`` of μ² where the rows are centered (``center``: the plan's default)."""
        return facts.center_share if facts.center else 0.0

    def build(self, facts, sigma):
        """Two stages where a refining pass pays (:func:`.preprocess.center_stages`, public); one in secure
        mode."""
        return Centering(1 if facts.secure_mode else preprocess.center_stages(sigma, facts.n, facts.model_dim,
                                                                               facts.clip))

    def compute(self, driver, ctx, key, sigma):
        """:func:`.preprocess.staged_mean` of the rows as the re-centering rounds left them; the refining
        stage's offsets are one more sum.  Secure mode: one stage (make_plan), drawn on the host.  In a program
        shared by plans of one and two stages (``ctx.center_stages``, traced), ``parts`` is the most of them."""
        rounds = ctx.rows.mean  # the re-centering rounds' means, where they ran
        total = rows_total(driver, ctx, "centering", rounds)
        noisy = driver.noisy(self.name, total)
        if noisy is not None:
            return preprocess.private_mean(total, ctx.n, None, sigma, ctx.clip, noisy=noisy)

        def offsets_of(first, r):
            return driver.total("centering, refined", jnp.zeros(ctx.model_dim, jnp.float64), offset_sum, first, r,
                                ctx.n, ctx.rows.log_scale, rounds, ctx.rows.skip, clip=ctx.clip)

        stages = self.stages if ctx.center_stages is None else ctx.center_stages  # traced: plans of 1 and 2 at once
        return preprocess.staged_mean(total, offsets_of, ctx.n, (stage_keys(key)[0], release_key(key, "center-refine")),
                                      sigma, stages, ctx.clip, ctx.model_dim, most=self.stages)

    def use(self, ctx, value):
        """Later rows are centered by it after the re-centering rounds' means: its value as released is that chain
        of means (R + 1, d') where the rounds ran, and it takes the rounds' place in ``values`` (one array, the
        fit program's output as it always was: a second output of the rounds alone compiles to a program that
        rounds differently)."""
        chain = self.map_rows(ctx.rows, value).mean
        values = {name: v for name, v in ctx.values.items() if name != "recenter"}
        return ctx._replace(values={**values, self.name: chain}, rows=ctx.rows._replace(mean=chain))

    def map_rows(self, rows, value):
        """Later rows are centered by it, after the re-centering rounds' means (a chain (R + 1, d')); a value
        that is already the chain (:meth:`use`) replaces the map's means."""
        if rows.mean is None or value.ndim == 2:
            return rows._replace(mean=value)
        return rows._replace(mean=jnp.concatenate([rows.mean, value[None]]))

    def note(self, plan, sigma, value):
        if self.stages != 2:
            return None
        r = float(preprocess.refine_radius(sigma, plan.n, plan.model_dim, plan.clip))
        return (f"centering released in 2 stages at σ {preprocess.stage_sigma(sigma, 2):.4g} each (they compose to "
                f"the one at σ {sigma:.4g}); the second sums offsets from the first estimate clipped to radius "
                f"{r:.3g}")
