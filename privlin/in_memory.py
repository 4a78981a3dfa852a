"""Fits on rows in memory: the in-memory driver (:class:`InMemory`: traced, jittable, vmappable), one plan on
in-memory rows (:func:`train_rows`, pure) and the compiled program that runs many plans of one form over one copy
of the rows (:func:`train_many`: ``jax.vmap`` over keys, σ's, learning rates; the sweep, CV folds, the audit).

The driver's totals are exact sums chunk by chunk (:func:`privlin.sensitivity.chunked`); its DP steps are one
``lax.scan`` of :func:`privlin.steps.dp_step` over rows mapped once.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from . import sensitivity, train
from .chain import Released, fit_chain
from .plan import Static
from .releases.base import RowMap, model_rows
from .steps import Steps, fit_steps

__all__ = ["InMemory", "train_rows", "train_many", "fit_full_batch", "fit_minibatch"]


class _Same:
    """A cache key equal only to a key of the very same objects: released values in a trace (tracers have no
    value to hash); it holds them, so they stay alive while the key does."""

    __slots__ = ("items",)

    def __init__(self, items):
        self.items = tuple(items)

    def __hash__(self):
        return hash(tuple(map(id, self.items)))

    def __eq__(self, other):
        return (isinstance(other, _Same) and len(self.items) == len(other.items)
                and all(a is b for a, b in zip(self.items, other.items)))


class InMemory(NamedTuple):
    """The driver on rows in memory (traced: jittable, vmappable): X (m, d), Y (m, k) one-hot, mask (m,);
    ``cache``: the mapped rows computed in this trace (:meth:`mapped`), or None to compute them each time."""

    X: jax.Array
    Y: Optional[jax.Array]
    mask: jax.Array
    cache: Optional[dict] = None
    verbose: bool = False

    def mapped(self, rows: RowMap, norm, normalize):
        """A driver over ``model_rows(X, rows, norm, normalize)``, computed once per map in this trace (the same
        released values, by identity: the curvature release and training read one copy)."""
        key = (norm, normalize, _Same(jax.tree.leaves(rows)))
        if self.cache is not None and key in self.cache:
            return self.cache[key]
        view = self._replace(X=model_rows(self.X, rows, norm, normalize), cache=None)
        if self.cache is not None:
            self.cache[key] = view
        return view

    def total(self, what, init, block_fn, *args, labels=False, sample=None, **static):
        """The exact sum, chunk by chunk over all rows (:func:`privlin.sensitivity.chunked`); ``sample``:
        ``(key, q)`` of a Poisson-sampled step (:func:`privlin.train.poisson_mask` of the rows' positions)."""
        mask = self.mask if sample is None else train.poisson_mask(*sample, 0, self.mask.shape[0]) * self.mask
        if labels:
            return sensitivity.chunked(lambda t, x, y, m: block_fn(t, x, y, m, *args, **static), init, self.X,
                                       self.Y, mask)
        return sensitivity.chunked(lambda t, x, m: block_fn(t, x, m, *args, **static), init, self.X, mask)

    def noisy(self, name, value):
        """None: every release draws its Gaussian noise from its key (secure mode always streams)."""
        return None

    def steps(self, step, state, keys, what):
        """The DP steps as one ``lax.scan`` (:class:`privlin.steps.StepDriver`)."""
        return jax.lax.scan(lambda s, key: (step(s, key), None), state, keys)[0]


# ----------------------------------------------------------------------------- the pure core

def train_rows(static: Static, X, Y, mask, n, key, sigma, sigma_ref, learning_rate,
               lr_ceiling=float("nan"), center_stages=None, given=None, recenter=None) -> Released:
    """Run one plan on in-memory rows (:func:`fit_chain` with the in-memory driver); pure, jittable, vmappable
    over (key, σ, σ_ref, lr, lr ceiling).

    Parameters
    ----------
    static : privlin.plan.Static
        ``Plan.static()`` (hashable: what the compiled code specializes on).
    X : (m, d) rows as given (float16/32); Y : (m, k) one-hot; mask : (m,) 1 for real rows, 0 for padding
        and null rows.  Trace under ``privlin.sensitivity.x64()`` (the released sums are exact float64).
    n : scalar
        The public N.
    key : jax key
    sigma, sigma_ref, learning_rate : scalars (may be traced): the steps' σ, ``Plan.reference_sigma`` (each
        release's σ is it times the chain's fixed ratio in ``static``), the learning rate.
    lr_ceiling : scalar
        ``Plan.learning_rate_ceiling``: with the curvature release, the most W's rate may be lifted to.
    center_stages : scalar, optional
        The plan's centering stages (1 or 2) where ``static`` is a program shared by plans of both
        (:func:`privlin.fit_groups.shared_form`: its centering has the most of them); None: the centering's own.
    recenter : scalar, optional
        The plan's re-centering σ ratio (−1: it makes no rounds) where ``static``'s re-centering has ratio None, a
        program shared by plans with and without the rounds (:func:`privlin.fit_groups.shared_form`).
    """
    X = jnp.asarray(X, jnp.float32)
    chain = [(r, sigma_ref * (recenter if ratio is None else ratio)) for r, ratio in static.chain]
    return fit_chain(InMemory(X, Y, mask, {}), static, chain, n, X.shape[1], Y.shape[1], key, sigma, learning_rate,
                     lr_ceiling, center_stages, given, recenter)


@functools.partial(jax.jit, static_argnames=("static", "k"))
def train_many(static, X, idx, mask, n, keys, sigmas, sigmas_ref, lrs, ceilings, stages, given=None, recenter=None,
               *, k):
    """:func:`train_rows` for S plans of one static form at once (``stages``: each plan's centering stages,
    ``recenter``: each plan's re-centering ratio or None, see :func:`privlin.fit_groups.shared_form`); the rows are
    shared (not batched)."""
    Y = jax.nn.one_hot(idx, k, dtype=jnp.float32)
    return jax.vmap(train_rows, in_axes=(None, None, None, None, None, 0, 0, 0, 0, 0, 0, None, 0))(
        static, X, Y, mask, n, keys, sigmas, sigmas_ref, lrs, ceilings, stages, given, recenter)


def fit_full_batch(X, Y, mask, n, key, sigma, learning_rate, *, steps: int, clip: float = 1.0,
                   loss: str = "softmax", optimizer: str = "sgd", momentum: float = 0.9, fit_intercept: bool = False,
                   bias_init: float = 0.0, row_norm: float | None = None, intercept_scale=1.0,
                   class_weight=None, start: train.LinearParams | None = None) -> train.LinearParams:
    """Full-batch DP-SGD (DP-RandP) for ``steps`` steps on in-memory rows; pure, jittable, vmappable.

    X : (m, d) preprocessed rows; Y : (m, k) one-hot; mask : (m,) 1 for real rows, 0 for padding and null rows;
    n : the public N (never Σ mask: which rows are null is private); key : split into one key per step.
    Every step adds fresh noise N(0, (σC)²) to the clipped gradient sum and divides by N
    (:func:`privlin.steps.dp_step`).  ``start``: weights to start from, computed without these rows
    (:func:`privlin.steps.fit_steps`); None: zero weights and the constant intercept ``bias_init``.
    """
    t = Steps(n, sigma, learning_rate, n, intercept_scale, None, clip, loss, optimizer, momentum, fit_intercept,
              row_norm, class_weight)
    return fit_steps(InMemory(X, Y, mask), t, key, steps, X.shape[1], Y.shape[1], bias_init, "sgd steps", start)


def fit_minibatch(X, Y, mask, n, key, sigma, learning_rate, *, steps: int, sample_rate: float, clip: float = 1.0,
                  loss: str = "softmax", optimizer: str = "sgd", momentum: float = 0.9, fit_intercept: bool = False,
                  bias_init: float = 0.0, row_norm: float | None = None, intercept_scale=1.0,
                  class_weight=None, start: train.LinearParams | None = None) -> train.LinearParams:
    """Poisson-subsampled DP-SGD / DP-Adam / DP-LAMB on in-memory rows; pure, jittable, vmappable: each step
    includes every row independently with probability ``sample_rate`` (the sampling the accountant assumes), adds
    fresh noise to the clipped sum and divides by the expected batch size q·N (N public), as in Opacus
    (:func:`privlin.steps.dp_step`); ``start`` as in :func:`fit_full_batch`."""
    t = Steps(n, sigma, learning_rate, sample_rate * n, intercept_scale, sample_rate, clip, loss, optimizer, momentum,
              fit_intercept, row_norm, class_weight)
    return fit_steps(InMemory(X, Y, mask), t, key, steps, X.shape[1], Y.shape[1], bias_init, "minibatch steps",
                     start)
