"""The DP step of ``sgd`` and ``minibatch`` training, written once (:func:`dp_step`), and the loop a driver runs it
in (:func:`fit_steps`).

A step: its keys from the step's key (:func:`step_keys`: a Poisson-sampled step splits it into a sample key and a
noise key, a full-batch step's key is its noise key), the clipped gradient sum of the step's rows through the
driver (:func:`gradient_total`), secure mode's host release of that sum or Gaussian noise drawn from the noise key,
the division by the public denominator (N, or the expected batch q·N) and one optimizer step
(:func:`privlin.train.noisy_update`).  Which loop runs the steps is the driver's (:class:`StepDriver`): in memory
one ``lax.scan`` (traced, vmappable), streamed a host loop with one pass over the rows per step; both call this
step with the same keys, so both draw the same sample and the same noise.  Iterate averaging
(:func:`privlin.train.average_weights`) rides in the same loop: post-processing of the released iterates, free of
privacy cost.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Optional, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from . import noise, train
from .releases.base import Driver

__all__ = ["Steps", "StepDriver", "step_keys", "gradient_total", "released_gradient", "dp_step", "fit_steps"]


class Steps(NamedTuple):
    """What every step of one fit shares: the public N, the steps' σ, the learning rate, the public denominator
    (N, or q·N), the intercept's rate relative to W's (:func:`privlin.train.noisy_update`), and the public
    settings; ``sample_rate`` None: full batch; ``gain``: a public factor on every row's gradient before the clip
    (``public_clip``, :func:`privlin.chain.public_start`), None: none."""

    n: object
    sigma: object
    learning_rate: object
    denom: object
    intercept_scale: object
    sample_rate: Optional[float]
    clip: float
    loss: str
    optimizer: str
    momentum: float
    fit_intercept: bool
    row_norm: Optional[float]
    class_weight: object
    gain: object = None


class StepDriver(Driver, Protocol):
    """A :class:`~privlin.releases.base.Driver` that runs training steps: ``steps(step, state, keys, what)`` is
    ``state = step(state, key)`` for every key in order (``what``: a progress label), however the driver loops;
    ``state`` is any pytree (a :class:`privlin.train.TrainState`, or one with the iterates' running mean)."""

    def steps(self, step: Callable, state, keys, what: str):
        """The state after every step."""


def step_keys(key, sample_rate: Optional[float]):
    """``(sample key or None, noise key)`` of a step's key: a full-batch step's key is its noise key; a sampled
    step's is split, so its sample and its noise are independent."""
    return (None, key) if sample_rate is None else tuple(noise.split(key))


def gradient_total(rows: Driver, params: train.LinearParams, t: Steps, sample_key=None) -> train.LinearParams:
    """The exact clipped gradient sum at ``params`` over the driver's rows (those of the Poisson sample of
    ``sample_key`` in a sampled step): :func:`privlin.train.grad_block` summed by the driver (each gradient times
    ``t.gain`` before the clip, where given)."""
    d1, k = params.W.shape[0] + (1 if t.fit_intercept else 0), params.W.shape[1]
    c_eff = _grad_clip(t.clip, t.n, d1, k)
    gain = () if t.gain is None else (t.gain,)
    G = rows.total(None, jnp.zeros((d1, k), jnp.float64), train.grad_block, params, c_eff, t.n, *gain, labels=True,
                   sample=None if sample_key is None else (sample_key, t.sample_rate), clip=t.clip, loss=t.loss,
                   fit_intercept=t.fit_intercept, row_norm=t.row_norm, class_weight=t.class_weight)
    return train.grad_params(G, t.fit_intercept)


def released_gradient(driver: Driver, g: train.LinearParams, fit_intercept: bool):
    """Secure mode's host release of a clipped gradient sum (W and b as one vector when b is trained), or None
    (the update adds its own Gaussian noise)."""
    def flat():
        W, b = np.asarray(g.W, np.float64), np.asarray(g.b, np.float64)
        return np.concatenate([W.ravel(), b]) if fit_intercept else W.ravel()

    noisy = driver.noisy("step", flat)
    if noisy is None:
        return None
    size = int(np.prod(g.W.shape))
    return train.LinearParams(jnp.asarray(noisy[:size].reshape(g.W.shape), jnp.float32),
                              jnp.asarray(noisy[size:], jnp.float32) if fit_intercept else g.b)


def dp_step(rows: Driver, t: Steps, state: train.TrainState, key) -> train.TrainState:
    """One DP step, whatever the loop: the step's keys (:func:`step_keys`), the clipped gradient sum of its rows
    (:func:`gradient_total`), noise on it (secure mode: released on the host, :func:`released_gradient`), the
    division by the public ``t.denom`` and the optimizer's update."""
    k_sample, k_noise = step_keys(key, t.sample_rate)
    g = gradient_total(rows, state.params, t, k_sample)
    sigma, noisy = t.sigma, released_gradient(rows, g, t.fit_intercept)
    if noisy is not None:  # released with the discrete Gaussian: nothing more to add in the update
        g, sigma = noisy, 0.0
    return _update(state, g, k_noise, sigma, t.denom, t.learning_rate, t.intercept_scale, optimizer=t.optimizer,
                   momentum=t.momentum, clip=t.clip, fit_intercept=t.fit_intercept)


def fit_steps(rows: StepDriver, t: Steps, key, steps: int, model_dim: int, k: int, bias_init: float,
              what: str, start: Optional[train.LinearParams] = None, average=0.0) -> train.LinearParams:
    """``steps`` DP steps, one key per step from ``key``, run by the driver (:meth:`StepDriver.steps`), from
    ``start`` (weights (model_dim, k) and intercept (k,) computed without private rows, e.g. a fit on public rows:
    the steps' noise and so ε do not depend on it) or, when None, from zero weights and a constant intercept.
    ``average``: the weights returned are the mean of the iterates :func:`privlin.train.average_weights` weighs
    (0: the last)."""
    opt = train.make_optimizer(t.optimizer, t.learning_rate, momentum=t.momentum)
    if start is None:
        state = train.init_state(model_dim, k, opt, bias_init)
    else:
        params = train.LinearParams(jnp.asarray(start.W, jnp.float32).reshape(model_dim, k),
                                    jnp.asarray(start.b, jnp.float32).reshape(k))
        state = train.TrainState(params, opt.init(params))
    keys, step = noise.split(key, steps), functools.partial(dp_step, rows, t)
    weights = train.average_weights(steps, average)
    if weights is None:
        return rows.steps(step, state, keys, what).params
    w = jnp.asarray(weights, jnp.float32)

    def averaged(carry, key):  # (state, running weighted sum of the iterates, step index)
        state, total, i = carry
        state = step(state, key)
        return state, _accumulate(total, state.params, w[i]), i + 1

    zero = jax.tree.map(jnp.zeros_like, state.params)
    return rows.steps(averaged, (state, zero, jnp.int32(0)), keys, what)[1]


# Jitted for the host loop, inlined into a traced one (the in-memory scan): one program for both.
_grad_clip = jax.jit(train.grad_clip, static_argnames=("clip", "d1", "k"), inline=True)


@functools.partial(jax.jit, static_argnames=("optimizer", "momentum", "clip", "fit_intercept"), inline=True)
def _update(state, grad_sum, key, sigma, denom, lr, intercept_scale, *, optimizer, momentum, clip, fit_intercept):
    opt = train.make_optimizer(optimizer, lr, momentum=momentum)
    return train.noisy_update(state, grad_sum, key, sigma, denom, opt, clip=clip, fit_intercept=fit_intercept,
                              intercept_scale=intercept_scale)


@functools.partial(jax.jit, inline=True)
def _accumulate(total, params, weight):
    return jax.tree.map(lambda a, p: a + weight * p, total, params)
