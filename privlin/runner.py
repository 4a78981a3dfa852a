"""The one runner: :func:`run` trains many plans on a source, each with its key, and returns what each releases.

Every plan runs :func:`privlin.chain.fit_chain` (its chain of releases, then DP training) through a driver; two
drivers, and nothing else differs between the ways a fit runs.  Rows that fit ``memory_limit`` are loaded once
(:mod:`privlin.rows`) and run in memory, many plans of one compiled form per vmapped call
(:mod:`privlin.fit_groups`, :mod:`privlin.in_memory`); the others, and secure mode, stream block by block
(:mod:`privlin.streamed`).  Rows are sharded over ``jax.devices()`` (and over hosts under ``jax.distributed``);
every noise draw is made once, on the global sum.  Keys: :func:`stage_keys` and :func:`release_key` (one split
of the fit's key, the same in both drivers).

Rows whose label is not in the public class list, rows with a non-finite value, and a store's rows skipped at
extraction (counted in N) are null rows: they contribute nothing (the zero-out relation), and nothing about
them is reported.  Every sum is divided by the public N, never by a count of rows.

The names of the modules it is made of are re-exported here (:func:`train_rows`, :func:`fit_chain`,
:class:`Released`, :func:`preprocess_rows`, :func:`in_memory_bytes`, ...), so ``privlin.runner`` stays the one
place to import the runner from.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from . import compilation, fit_groups, progress, sensitivity, streamed
from .chain import Released, fit_chain, preprocess_rows
from .data import Source
from .fit_groups import CALL_WORK, in_memory_bytes, max_settings, setting_bytes, setting_work
from .in_memory import train_rows
from .plan import Plan
from .releases.base import release_key, stage_keys
from .rows import BLOCK_BYTES, TAIL_ROWS, Rows, stream_block_rows

__all__ = ["Released", "fit_chain", "train_rows", "run", "stage_keys", "release_key", "TAIL_ROWS", "BLOCK_BYTES",
           "preprocess_rows", "in_memory_bytes", "setting_work", "setting_bytes", "max_settings", "CALL_WORK",
           "stream_block_rows"]


def run(plans: Sequence[Plan], source: Source, keys: Sequence, classes: np.ndarray, *, block_rows: int = 65536,
        memory_limit: int = 2**30, verbose: bool = False, given=None) -> list[Released]:
    """Run every plan on ``source`` with its key; returns one :class:`Released` per plan, in order.

    Parameters
    ----------
    plans : sequence of Plan
        Made for ``source`` (same N and dimension) and ``classes``.
    keys : sequence of jax keys, one per plan
    classes : ndarray (k,)
        The public class list (sorted).
    block_rows : int
        Rows per block when streaming (fewer where a block would exceed :data:`privlin.rows.BLOCK_BYTES`).
    memory_limit : int
        Bytes of rows held in memory (:func:`in_memory_bytes`); above it the rows are streamed.  Beside them, a
        call of the in-memory program runs as many settings as the rest allows (:func:`setting_bytes`: mapped rows
        of centered sgd/minibatch plans, the d x d matrices of whitening and curvature), at least one.
    verbose : bool
        Show each stage that runs more than a few seconds (:mod:`privlin.progress`).
    given : dict, optional
        ``{name: value}`` of the releases the plans' ``given`` names: public values, used as if released.
    """
    compilation.enable()  # JAX's persistent compilation cache, once (privlin.compilation)
    with sensitivity.x64():
        return _run(list(plans), source, keys, classes, block_rows, memory_limit, verbose, given)


def _run(plans, source, keys, classes, block_rows, memory_limit, verbose, given=None) -> list[Released]:
    if len(keys) != len(plans):
        raise ValueError(f"{len(plans)} plans but {len(keys)} keys")
    for p in plans:
        if (p.n, p.dim, p.n_classes) != (source.n, source.dim, len(classes)):
            raise ValueError(f"plan made for N={p.n}, d={p.dim}, k={p.n_classes}; the source has N={source.n}, "
                             f"d={source.dim}, k={len(classes)}")
    rows = Rows(source, classes, block_rows, verbose)
    out: list[Optional[Released]] = [None] * len(plans)
    fits = fit_groups.in_memory_bytes(source, len(classes)) <= memory_limit
    groups: dict[tuple, list[int]] = {}
    rounds = fit_groups.shares_rounds(source)
    for i, p in enumerate(plans):
        if p.secure_mode or not fits:
            continue
        groups.setdefault(fit_groups.shared_form(p.static(), rounds), []).append(i)
    if groups:
        with progress.stage(f"reading {source.n} rows into memory", verbose):
            X, labels, mask = rows.load()
        spare = max(0, memory_limit - fit_groups.in_memory_bytes(source, len(classes)))
        fit_groups.run_groups(plans, keys, groups, (X, labels, mask), float(source.n), len(classes), spare, verbose,
                              out, given)
    rest = [i for i in range(len(plans)) if out[i] is None]
    for i, released in zip(rest, streamed.stream(rows, [plans[i] for i in rest], [keys[i] for i in rest], given)):
        out[i] = released
    for r in out:  # exact sums of finite, clipped rows and finite noise: anything else is a bug, never released
        if not (np.isfinite(r.W).all() and np.isfinite(r.b).all()):  # on the host: no program compiled per shape
            raise RuntimeError("privlin produced non-finite weights (an internal error): nothing is released")
    return out
