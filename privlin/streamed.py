"""The streamed driver: fits on a source's rows block by block (:func:`stream`), for rows that do not fit in
memory and for secure mode.

One pass over the rows per total (:func:`_pass`: the block function compiled once per (function, static
settings), two blocks in flight), one per DP step (the driver's loop runs :func:`privlin.steps.dp_step` on the
host); a total that an earlier plan of the same run already took is reused (:class:`_Streamed`); in
``secure_mode`` every release is drawn on the host with the discrete Gaussian (:meth:`_Streamed.noisy`).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import numpy as np

from . import progress, secure_noise, sensitivity, train
from .chain import Released, fit_chain
from .plan import Plan
from .releases.base import RowMap, model_rows
from .rows import Rows

__all__ = ["stream"]


def stream(rows: Rows, plans: list[Plan], keys: list, given=None) -> list[Released]:
    """Plans whose rows do not fit in memory, or in secure mode: :func:`fit_chain` with the streamed driver, one
    plan after another; a total that an earlier plan already took (same function, same scalar arguments: the row
    norm, the first centering sum at the same clip and R, adam1's class sums of uncentered rows) is not taken
    again."""
    shared: dict = {}
    return [fit_chain(_Streamed(rows, p, shared), p.static(), p.chain, float(p.n), p.dim, rows.k, key, p.sigma,
                      p.learning_rate, p.learning_rate_ceiling, given=given) for p, key in zip(plans, keys)]


class _Streamed:
    """The driver on a source's rows, block by block (:func:`_pass`: two blocks in flight); ``shared``: the
    totals already taken in this run, by (block function, static settings, arguments)."""

    def __init__(self, rows: Rows, plan: Plan, shared: dict):
        self.rows, self.plan, self.shared, self.verbose = rows, plan, shared, rows.verbose

    def total(self, what, init, block_fn, *args, labels=False, sample=None, **static):
        """One pass with ``block_fn`` compiled once per (function, static settings) (:func:`_compiled`), unless an
        identical total was taken already; ``sample``: ``(key, q)`` of a Poisson-sampled step.

        Only totals whose arguments are scalars (N, a released log₂ R: the row norm, the first centering sum,
        uncentered adam1's class sums) are kept for later plans: one that reads a plan's own noisy vectors (a
        mean, a scaling, the weights) never repeats, and keeping it would only hold device memory."""
        static = tuple(sorted(static.items()))
        scalars = sample is None and all(np.ndim(leaf) == 0 for leaf in jax.tree.leaves(args))
        memo = (block_fn, labels, static, _fingerprint((init, args))) if scalars else None
        if memo is not None and memo in self.shared:
            return self.shared[memo]
        fn = _compiled(block_fn, labels, self.rows.k if labels else 0, static)
        total = _pass(self.rows, what, fn, init, *args, labels=labels, sample=sample)
        if memo is not None:
            self.shared[memo] = total
        return total

    def mapped(self, rows: RowMap, norm, normalize):
        """A driver whose block functions see each block's rows mapped by ``rows`` (:func:`model_rows`)."""
        return _StreamedView(self, rows, norm, normalize)

    def noisy(self, name, value):
        """Secure mode: ``value`` (or what the function ``value`` returns) released with the discrete Gaussian
        drawn on the host from ``os.urandom``, with the plan's table (:meth:`Plan.secure_table`).  The one place
        where the streamed driver's noise differs."""
        if not self.plan.secure_mode:
            return None
        std, sens, bound = self.plan.secure_table()[name]
        value = value() if callable(value) else value
        return secure_noise.secure_gaussian_release(np.asarray(value, np.float64), std, sens, bound=bound)

    def steps(self, step, state, keys, what):
        """The DP steps as a host loop, one pass over the rows per step (:class:`privlin.steps.StepDriver`)."""
        for key in progress.bar(keys, what, self.verbose):
            state = step(state, key)
        return state


class _StreamedView(NamedTuple):
    """:meth:`_Streamed.mapped`: totals of the parent driver with ``model_rows`` applied to each chunk first."""

    parent: _Streamed
    rows: RowMap
    norm: float
    normalize: bool

    @property
    def verbose(self):
        return self.parent.verbose

    def total(self, what, init, block_fn, *args, labels=False, sample=None, **static):
        return self.parent.total(what, init, _OnMapped(block_fn, self.norm, self.normalize, labels), self.rows, *args,
                                 labels=labels, sample=sample, **static)

    def mapped(self, rows, norm, normalize):
        raise NotImplementedError("map the driver's own rows, not mapped ones")

    def noisy(self, name, value):
        return self.parent.noisy(name, value)

    def steps(self, step, state, keys, what):
        return self.parent.steps(step, state, keys, what)


class _OnMapped(NamedTuple):
    """``fn`` on a chunk's rows mapped by the :class:`RowMap` that comes first among its arguments (hashable: one
    compiled block function per (fn, norm, normalize))."""

    fn: object
    norm: float
    normalize: bool
    labels: bool

    def __call__(self, total, X, *rest, **static):
        k = 2 if self.labels else 1  # (y, mask) or (mask)
        data, rows, args = rest[:k], rest[k], rest[k + 1:]
        return self.fn(total, model_rows(X, rows, self.norm, self.normalize), *data, *args, **static)


def _fingerprint(tree):
    """A hashable key of a pytree's structure and values (arrays by dtype, shape and bytes)."""
    leaves, treedef = jax.tree.flatten(tree)
    out = []
    for leaf in leaves:
        if isinstance(leaf, (jax.Array, np.ndarray, np.generic)):
            a = np.asarray(leaf)
            out.append((a.dtype.str, a.shape, a.tobytes()))
        else:
            out.append((type(leaf).__name__, leaf))
    return treedef, tuple(out)


@functools.lru_cache(maxsize=None)
def _compiled(block_fn, labels: bool, k: int, static: tuple):
    """``block_fn`` over one device block, chunk by chunk, jitted (labels: class indices made one-hot)."""
    kw = dict(static)
    if labels:
        def block(total, X, idx, mask, *args):
            return sensitivity.chunked(lambda t, x, i, m: block_fn(t, x, jax.nn.one_hot(i, k), m, *args, **kw),
                                       total, X, idx, mask)
    else:
        def block(total, X, mask, *args):
            return sensitivity.chunked(lambda t, x, m: block_fn(t, x, m, *args, **kw), total, X, mask)
    return jax.jit(block)


_sample = jax.jit(train.poisson_mask, static_argnames=("length", "sample_rate"))  # q: the accountant's float


def _pass(rows: Rows, what, block_fn, total, *args, labels=False, sample=None):
    """One pass over the rows (progress label ``what``): ``total = block_fn(total, X[, idx], mask, *args)`` block
    by block, double-buffered (:func:`_double_buffered`); ``sample``: ``(key, q)``: each block's mask times the
    Poisson sample of its rows' global positions (the same sample as in memory)."""
    def sums(total=total):
        for X, idx, mask, start in rows.device_blocks(what, with_counts=True):
            if sample is not None:
                mask = mask * _sample(sample[0], sample[1], start, mask.shape[0])
            total = block_fn(total, X, idx, mask, *args) if labels else block_fn(total, X, mask, *args)
            yield total
    return _double_buffered(sums())


def _double_buffered(results):
    """Drive an accumulation of device results, keeping at most two in flight.

    While the device works on block i, the host reads block i+1 (JAX dispatch is asynchronous); waiting on the
    previous result bounds memory to two blocks.  Returns the last result.
    """
    prev = last = None
    for last in results:
        if prev is not None:
            jax.block_until_ready(prev)
        prev = last
    return last
