"""One model: :func:`fit_chain` walks a plan's chain of releases (:mod:`privlin.releases`: row norm,
re-centering, centering, scaling, curvature, any added release) and then trains, on rows seen only through a
driver (:class:`privlin.releases.base.Driver`: :class:`privlin.in_memory.InMemory`, traced; the streamed one of
:mod:`privlin.streamed`); :class:`Released` is what it releases, :func:`preprocess_rows` the rows a fitted model
reads.

Training is ``adam1``'s one class-sum total and :func:`privlin.train.adam1_step`, or ``sgd``/``minibatch``'s DP
steps (:func:`privlin.steps.fit_steps`: one step function, the loop the driver's).  Every sum is divided by the
public N, never by a count of rows.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp

from . import steps, train
from .plan import START, Plan, Static, learning_rates
from .releases.base import Context, Driver, RowMap, model_rows, rows_and_center, stage_keys

__all__ = ["Released", "fit_chain", "preprocess_rows", "public_start"]


class Released(NamedTuple):
    """Everything a fit releases: weights ``W`` (d', k), intercept ``b`` (k,) and ``values``: each release's value
    by its name (:class:`privlin.releases.base.Context`'s ``values``); d' = ``Plan.model_dim``."""

    W: jax.Array
    b: jax.Array
    values: dict


def fit_chain(driver: Driver, settings: Static, chain: Sequence, n, dim: int, k: int, key, sigma, learning_rate,
              lr_ceiling, center_stages=None, given=None, recenter=None) -> Released:
    """What runs when one model is trained: the plan's chain of releases in order, then DP training.

    Each release computes its value from the rows through ``driver`` (:class:`privlin.releases.base.Driver`: its
    exact sums, and where secure mode draws noise) and the values released before it; :meth:`Release.use` says
    how later rows use the value (the :class:`~privlin.releases.base.Context`'s row map).  Training is the last
    step, on the rows as the chain left them (:func:`_train`).  Both drivers run exactly this.

    Parameters
    ----------
    driver : :class:`_InMemory` (traced) or :class:`_Streamed`
    settings : privlin.plan.Static
        The plan's training settings (its ``chain`` field is not read: ``chain`` carries the σ's).
    chain : sequence of (Release, σ)
    n : the public N; dim : the rows' dimension; k : the number of classes
    key : the fit's key (:func:`stage_keys`, :func:`release_key`)
    sigma, learning_rate, lr_ceiling : the steps' σ, the learning rate, ``Plan.learning_rate_ceiling``
    center_stages : this plan's centering stages where one program runs plans of one and two (traced), else None
    given : ``{name: value}`` of the releases ``settings.given`` names (:attr:`Plan.given`): used where they run,
        exactly as if released
    recenter : this plan's re-centering σ ratio (−1: no rounds) where one program runs plans with and without
        them (traced; :func:`privlin.fit_groups.shared_form`), else None
    """
    at = [[g for g, before in settings.given if before == i] for i in range(len(chain) + 1)]
    ctx = Context(n, dim, dim + sum(r.adds_dims for r, _ in chain) + sum(g.adds_dims for g, _ in settings.given),
                  settings.clip, settings.normalize, center_stages=center_stages, recenter=recenter)
    for i, (release, release_sigma) in enumerate((*chain, (None, None))):
        for g in at[i]:
            ctx = g.use(ctx, given[g.name])
        if release is not None:
            ctx = release.use(ctx, release.compute(driver, ctx, key, release_sigma))
    start = None if given is None or START not in given else public_start(settings, ctx, k, given[START])
    gain = None if start is None or not settings.public_clip else clip_gain(start, settings.clip)
    params = _train(driver, settings, ctx, k, stage_keys(key)[2], sigma, learning_rate, lr_ceiling, start, gain)
    return Released(params.W, params.b, ctx.values)


def public_start(s: Static, ctx: Context, k: int, rows) -> train.PublicFit:
    """The DP steps' start from labelled public rows (``given[START]``: ``(X, class index, mask)``): the rows mapped
    exactly as the private rows are (the chain's row map: its released and given values) and
    :func:`privlin.train.public_fit` on them.  A function of the public rows and the released values only."""
    X, idx, mask = rows
    Z = model_rows(jnp.asarray(X, jnp.float32), ctx.row_map(), s.clip, s.normalize)
    return _public_fit(Z, idx, mask, k=k, loss=s.loss, fit_intercept=s.fit_intercept, bias_init=float(s.bias_init))


def clip_gain(start: train.PublicFit, clip: float):
    """``public_clip``: the factor every private gradient is multiplied by before the clip at C, C over the public
    rows' class-balanced held-out gradient norm at the start (:class:`privlin.train.PublicFit`), within [1,
    :data:`privlin.defaults.PUBLIC_CLIP_MAX_GAIN`].

    Why: from a start that already classifies most rows, a fresh row's gradient is far shorter than C, so a clip at
    C leaves nearly every gradient alone while the noise is calibrated to C; clipping at the typical norm (a gain
    on the gradients, the same σ and clip) keeps the signal of the rows the start gets wrong and the noise's
    share falls by the gain.  The norm is estimated on public rows held out of the folds' fits (the start has seen
    every public row: its own norms there are too short).  Public: a function of the public rows and released
    values only; σ, the clip and so ε are unchanged."""
    from .defaults import PUBLIC_CLIP_MAX_GAIN

    return jnp.clip(clip / jnp.maximum(start.held_out_norm, 1e-30), 1.0, PUBLIC_CLIP_MAX_GAIN).astype(jnp.float32)


def _train(driver, s: Static, ctx: Context, k: int, key, sigma, lr, ceiling, start=None,
           gain=None) -> train.LinearParams:
    """DP training on the rows as the chain left them: ``adam1`` is one class-sum total and
    :func:`privlin.train.adam1_step`; ``sgd``/``minibatch`` the DP steps on the rows as the chain maps them
    (:func:`privlin.steps.fit_steps`, from ``start`` where given, each gradient times ``gain`` before the clip
    where given, the rates then at most :func:`privlin.train.gained_cap`), each step's clipped gradient divided by
    the public batch size: N, or the expected q·N of a Poisson-sampled step."""
    intercept_scale = 1.0
    if ctx.curvature is not None:  # lifts W's rate (sgd optimizer only: never adam1)
        lr, intercept_scale = _lifted_rates(ceiling, ctx.curvature, s.momentum, s.clip, s.fit_intercept)
    if gain is not None:  # the gained gradients' stability cap, on W's rate and the intercept's
        cap = train.gained_cap(gain, momentum=s.momentum, clip=s.clip, fit_intercept=s.fit_intercept)
        lr, intercept_scale = jnp.minimum(lr, cap), jnp.minimum(lr * intercept_scale, cap) / jnp.minimum(lr, cap)
    if s.method == "adam1":  # never with a start: make_plan refuses public_start for adam1, before any charge
        sums = driver.total("adam1 pass", train.class_sums_init(ctx.model_dim, k), _class_sums, ctx.row_map(), ctx.n,
                            labels=True, clip=s.clip, normalize=s.normalize, loss=s.loss, bias_init=s.bias_init,
                            fit_intercept=s.fit_intercept, class_weight=s.class_weight)
        noisy = steps.released_gradient(driver, train.adam1_gradient(sums, loss=s.loss, bias_init=s.bias_init),
                                        s.fit_intercept)
        if noisy is not None:
            return train.adam1_update(noisy, ctx.n, lr, bias_init=s.bias_init, fit_intercept=s.fit_intercept)
        return train.adam1_step(sums, ctx.n, key, sigma, lr, clip=s.clip, loss=s.loss, bias_init=s.bias_init,
                                fit_intercept=s.fit_intercept)
    q = s.sample_rate if s.method == "minibatch" else None  # a minibatch step samples even where q is 1
    t = steps.Steps(ctx.n, sigma, lr, ctx.n if q is None else q * ctx.n, intercept_scale, q, s.clip, s.loss,
                    s.optimizer, s.momentum, s.fit_intercept, s.clip if s.normalize else None, s.class_weight, gain)
    rows = driver.mapped(ctx.row_map(), s.clip, s.normalize)  # in memory: the curvature release's, if it read them
    return steps.fit_steps(rows, t, key, s.steps, ctx.model_dim, k, s.bias_init, f"{s.method} steps", start,
                           s.average)


def _class_sums(acc, X, Y, mask, rows: RowMap, n, *, clip, normalize, loss, bias_init, fit_intercept, class_weight):
    """``acc`` + adam1's class sums (:func:`privlin.train.class_sums_update`) of a chunk of training rows: the rows
    up to their last centering and its mean (:func:`rows_and_center`), so that plans vmapped over their means share
    the pass."""
    U, center = rows_and_center(X, rows, clip, normalize)
    return train.class_sums_update(acc, U, Y, mask, clip, n, loss=loss, bias_init=bias_init,
                                   fit_intercept=fit_intercept, row_norm=clip if normalize else None, center=center,
                                   class_weight=class_weight)


def _lifted_rates(ceiling, curvature, momentum, clip, fit_intercept):
    """(W's rate, intercept's rate / W's) from a released curvature bound (:func:`privlin.plan.learning_rates`);
    the intercept's rate is applied by scaling its gradient (:func:`privlin.train.noisy_update`)."""
    lr_w, lr_b = learning_rates(ceiling, curvature, momentum=momentum, clip=clip, fit_intercept=fit_intercept)
    return lr_w, lr_b / lr_w


def preprocess_rows(plan: Plan, X, mean=None, scl=None, log_scale=None, *, values=None) -> jax.Array:
    """Rows as a fitted plan's model sees them (prediction uses this): from the released ``values`` by release name
    (:meth:`Plan.row_map`), or from the released mean, scaling and ``log_scale`` (the released log₂ R of a radial
    plan: its rows gain their radial coordinate first)."""
    project = None
    if values is not None:
        mean, scl, log_scale, project = plan.row_map(values)[:4]
    if plan.radial and log_scale is None:
        raise ValueError("this plan's rows carry a radial coordinate: pass the released log2 row norm")
    rows = RowMap(None if mean is None else jnp.asarray(mean), scl,
                  None if log_scale is None or not plan.radial else jnp.float32(log_scale), project)
    return _model_rows_jit(jnp.asarray(X), rows, plan.clip, plan.normalize)


_model_rows_jit = jax.jit(model_rows, static_argnames=("norm", "normalize"))
_public_fit = jax.jit(train.public_fit, static_argnames=("k", "loss", "fit_intercept", "bias_init", "folds",
                                                         "iterations"), inline=True)
