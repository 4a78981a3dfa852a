"""The one runner: what runs when a model is trained — :func:`fit_chain`, one walk of a plan's chain of releases
(:mod:`privlin.releases`: row norm, re-centering, centering, scaling, curvature, any added release), then DP
training — on rows through a driver.

A release sees the rows only through its driver (:class:`privlin.releases.base.Driver`): ``total`` (an exact sum
of a block function over all rows), ``mapped`` (the same driver over the rows as the released values map them)
and ``noisy`` (secure mode's host noise, or None).  Two drivers, and nothing else differs between the ways a fit
runs:

* :class:`_InMemory` — rows in memory, traced: :func:`train_rows` is pure and jittable; ``jax.vmap`` runs many
  plans that share their compiled form (:meth:`Plan.static`) over one copy of the rows (the sweep), or one plan
  over many keys (the audit).  Its sgd/minibatch steps are :func:`privlin.train.fit_full_batch` /
  :func:`~privlin.train.fit_minibatch`'s ``lax.scan`` over rows mapped once (:func:`_scan_steps`).
* :class:`_Streamed` — a :class:`privlin.data.Source` block by block (:func:`_pass`: two blocks in flight,
  page-locked buffers on a GPU); one pass per total, one per step for ``sgd``/``minibatch``
  (:func:`_step_loop`); a total another plan of the same run already took is reused; ``secure_mode`` draws every
  release on the host with the discrete Gaussian.

:func:`run` runs many plans on a source: rows that fit ``memory_limit`` are loaded once and handed to
:func:`train_rows` (vmapped per group of plans); the others, and secure mode, stream.  Rows are sharded over
``jax.devices()`` (and over hosts under ``jax.distributed``); every noise draw is made once, on the global sum.
Keys: :func:`stage_keys` and :func:`release_key` (one split of the fit's key, the same in both drivers).

Rows whose label is not in the public class list, rows with a non-finite value, and a store's rows skipped at
extraction (counted in N) are null rows: they contribute nothing (the zero-out relation), and nothing about
them is reported.  Every sum is divided by the public N, never by a count of rows.
"""
from __future__ import annotations

import dataclasses
import functools
import queue
import threading
import time
from typing import Iterator, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import compilation, noise, progress, secure_noise, sensitivity, train
from .data import Source, label_index
from .plan import Plan, Static, learning_rates
from .releases.base import Context, Driver, RowMap, model_rows, release_key, rows_and_center, stage_keys

__all__ = ["Released", "fit_chain", "train_rows", "run", "stage_keys", "release_key", "TAIL_ROWS"]

#: A short last block is padded to a multiple of this many rows (not to a full block): a few compiled shapes
#: instead of up to one block of zero rows computed for nothing.  A multiple of CHUNK_ROWS.
TAIL_ROWS = 8192
#: Most bytes of stored rows in one streamed block: ``block_rows`` rows of a 36 864-d float16 store would be
#: 4.8 GB, times the float32 copy on the device; blocks are cut to this size (whole CHUNK_ROWS multiples).
BLOCK_BYTES = 256 << 20
#: Stream a store's blocks through page-locked host buffers when the device is a GPU (see :func:`_page_locked`);
#: benchmarks switch it off to measure the ordinary route in the same run.
PAGE_LOCKED = True


class Released(NamedTuple):
    """Everything a fit releases: weights ``W`` (d', k), intercept ``b`` (k,) and ``values``: each release's value
    by its name (:class:`privlin.releases.base.Context`'s ``values``); d' = ``Plan.model_dim``."""

    W: jax.Array
    b: jax.Array
    values: dict


# ----------------------------------------------------------------------------- one model: the chain, then training

def fit_chain(driver: Driver, settings: Static, chain: Sequence, n, dim: int, k: int, key, sigma, learning_rate,
              lr_ceiling, center_stages=None, given=None) -> Released:
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
    """
    at = [[g for g, before in settings.given if before == i] for i in range(len(chain) + 1)]
    ctx = Context(n, dim, dim + sum(r.adds_dims for r, _ in chain) + sum(g.adds_dims for g, _ in settings.given),
                  settings.clip, settings.normalize, center_stages=center_stages)
    for i, (release, release_sigma) in enumerate((*chain, (None, None))):
        for g in at[i]:
            ctx = g.use(ctx, given[g.name])
        if release is not None:
            ctx = release.use(ctx, release.compute(driver, ctx, key, release_sigma))
    params = _train(driver, settings, ctx, k, stage_keys(key)[2], sigma, learning_rate, lr_ceiling)
    return Released(params.W, params.b, ctx.values)


def _train(driver, s: Static, ctx: Context, k: int, key, sigma, lr, ceiling) -> train.LinearParams:
    """DP training on the rows as the chain left them: ``adam1`` is one class-sum total and
    :func:`privlin.train.adam1_step`; ``sgd``/``minibatch`` one clipped-gradient total per step
    (:func:`_step_loop`; in memory the same steps as :func:`privlin.train.fit_full_batch` /
    :func:`~privlin.train.fit_minibatch`'s scan over the rows prepared once, :func:`_scan_steps`)."""
    intercept_scale = 1.0
    if ctx.curvature is not None:  # lifts W's rate (sgd optimizer only: never adam1)
        lr, intercept_scale = _lifted_rates(ceiling, ctx.curvature, s.momentum, s.clip, s.fit_intercept)
    if s.method == "adam1":
        sums = driver.total("adam1 pass", train.class_sums_init(ctx.model_dim, k), _class_sums, ctx.row_map(), ctx.n,
                            labels=True, clip=s.clip, normalize=s.normalize, loss=s.loss, bias_init=s.bias_init,
                            fit_intercept=s.fit_intercept, class_weight=s.class_weight)
        noisy = _released_gradient(driver, train.adam1_gradient(sums, loss=s.loss, bias_init=s.bias_init),
                                   s.fit_intercept)
        if noisy is not None:
            return train.adam1_update(noisy, ctx.n, lr, bias_init=s.bias_init, fit_intercept=s.fit_intercept)
        return train.adam1_step(sums, ctx.n, key, sigma, lr, clip=s.clip, loss=s.loss, bias_init=s.bias_init,
                                fit_intercept=s.fit_intercept)
    if isinstance(driver, _InMemory):
        return _scan_steps(driver, s, ctx, key, sigma, lr, intercept_scale)
    return _step_loop(driver, s, ctx, k, key, sigma, lr, intercept_scale)


def _class_sums(acc, X, Y, mask, rows: RowMap, n, *, clip, normalize, loss, bias_init, fit_intercept, class_weight):
    """``acc`` + adam1's class sums (:func:`privlin.train.class_sums_update`) of a chunk of training rows: the rows
    up to their last centering and its mean (:func:`rows_and_center`), so that plans vmapped over their means share
    the pass."""
    U, center = rows_and_center(X, rows, clip, normalize)
    return train.class_sums_update(acc, U, Y, mask, clip, n, loss=loss, bias_init=bias_init,
                                   fit_intercept=fit_intercept, row_norm=clip if normalize else None, center=center,
                                   class_weight=class_weight)


def _grad_sum(acc, Z, Y, mask, params, n, *, clip, normalize, loss, fit_intercept, class_weight):
    """``acc`` + the clipped gradient sum (:func:`privlin.train.clipped_grad_sum`) of a chunk of training rows
    ``Z`` (mapped: :meth:`Driver.mapped`)."""
    g = train.clipped_grad_sum(params, Z, Y, mask, clip, n, loss=loss, fit_intercept=fit_intercept,
                               row_norm=clip if normalize else None, class_weight=class_weight)
    return jax.tree.map(jnp.add, acc, g)


def _step_loop(driver, s: Static, ctx: Context, k: int, key, sigma, lr, intercept_scale) -> train.LinearParams:
    """``sgd`` / ``minibatch``: one clipped-gradient total per step (a pass over a store), noised (secure mode: on
    the host), divided by the public batch size q·N, one optimizer step; the same keys and sample as
    :func:`privlin.train.fit_full_batch` / :func:`~privlin.train.fit_minibatch`."""
    q = s.sample_rate
    opt = train.make_optimizer(s.optimizer, lr, momentum=s.momentum)
    state = train.init_state(ctx.model_dim, k, opt, s.bias_init)
    rows, denom = driver.mapped(ctx.row_map(), s.clip, s.normalize), q * ctx.n  # public: expected (q<1) or exact
    for step_key in progress.bar(noise.split(key, s.steps), f"{s.method} steps", driver.verbose):
        # full batch: the step key is the noise key, exactly as in train.fit_full_batch
        k_sample, k_noise = noise.split(step_key) if q < 1.0 else (None, step_key)
        zero = train.LinearParams(jnp.zeros((ctx.model_dim, k), jnp.float64), jnp.zeros((k,), jnp.float64))
        g = rows.total(None, zero, _grad_sum, state.params, ctx.n, labels=True,
                       sample=None if q >= 1.0 else (k_sample, q), clip=s.clip, normalize=s.normalize, loss=s.loss,
                       fit_intercept=s.fit_intercept, class_weight=s.class_weight)
        step_sigma, noisy = sigma, _released_gradient(driver, g, s.fit_intercept)
        if noisy is not None:  # released with the discrete Gaussian: nothing more to add in the update
            g, step_sigma = noisy, 0.0
        state = _noisy_step(state, g, k_noise, step_sigma, denom, lr, s.momentum, s.clip, intercept_scale,
                            optimizer=s.optimizer, fit_intercept=s.fit_intercept)
    return state.params


def _scan_steps(driver: "_InMemory", s: Static, ctx: Context, key, sigma, lr, intercept_scale):
    """The in-memory form of :func:`_step_loop`: the rows mapped once, then the steps as one ``lax.scan``
    (:func:`privlin.train.fit_full_batch` / :func:`~privlin.train.fit_minibatch`)."""
    Xp = driver.mapped(ctx.row_map(), s.clip, s.normalize).X  # the curvature release's rows, if it read them
    kw = dict(steps=s.steps, clip=s.clip, loss=s.loss, optimizer=s.optimizer, momentum=s.momentum,
              fit_intercept=s.fit_intercept, bias_init=s.bias_init, row_norm=s.clip if s.normalize else None,
              intercept_scale=intercept_scale, class_weight=s.class_weight)
    if s.method == "sgd":
        return train.fit_full_batch(Xp, driver.Y, driver.mask, ctx.n, key, sigma, lr, **kw)
    return train.fit_minibatch(Xp, driver.Y, driver.mask, ctx.n, key, sigma, lr, sample_rate=s.sample_rate, **kw)


def _released_gradient(driver, g: train.LinearParams, fit_intercept: bool):
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


@functools.partial(jax.jit, static_argnames=("optimizer", "fit_intercept"))
def _noisy_step(state, grad_sum, key, sigma, denom, lr, momentum, clip, intercept_scale, *, optimizer, fit_intercept):
    opt = train.make_optimizer(optimizer, lr, momentum=momentum)
    return train.noisy_update(state, grad_sum, key, sigma, denom, opt, clip=clip, fit_intercept=fit_intercept,
                              intercept_scale=intercept_scale)


def _lifted_rates(ceiling, curvature, momentum, clip, fit_intercept):
    """(W's rate, intercept's rate / W's) from a released curvature bound (:func:`privlin.plan.learning_rates`);
    the intercept's rate is applied by scaling its gradient (:func:`privlin.train.noisy_update`)."""
    lr_w, lr_b = learning_rates(ceiling, curvature, momentum=momentum, clip=clip, fit_intercept=fit_intercept)
    return lr_w, lr_b / lr_w


# ----------------------------------------------------------------------------- the in-memory driver

class _InMemory(NamedTuple):
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
        leaves = jax.tree.leaves(rows)
        key = (norm, normalize, tuple(map(id, leaves)))
        if self.cache is not None and key in self.cache:
            return self.cache[key][0]
        view = self._replace(X=model_rows(self.X, rows, norm, normalize), cache=None)
        if self.cache is not None:
            self.cache[key] = (view, leaves)  # the leaves stay alive: their ids stay theirs
        return view

    def total(self, what, init, block_fn, *args, labels=False, sample=None, **static):
        """The exact sum, chunk by chunk over all rows (:func:`privlin.sensitivity.chunked`); ``sample``:
        ``(key, q)`` of a Poisson-sampled step (:func:`privlin.train.poisson_mask` of the rows' positions)."""
        mask = self.mask if sample is None else self.mask * train.poisson_mask(*sample, 0, self.mask.shape[0])
        if labels:
            return sensitivity.chunked(lambda t, x, y, m: block_fn(t, x, y, m, *args, **static), init, self.X,
                                       self.Y, mask)
        return sensitivity.chunked(lambda t, x, m: block_fn(t, x, m, *args, **static), init, self.X, mask)

    def noisy(self, name, value):
        """None: every release draws its Gaussian noise from its key (secure mode always streams)."""
        return None


# ----------------------------------------------------------------------------- the pure core

def train_rows(static: Static, X, Y, mask, n, key, sigma, sigma_ref, learning_rate,
               lr_ceiling=float("nan"), center_stages=None, given=None) -> Released:
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
        (:func:`_shared_form`: its centering has the most of them); None: the centering's own.
    given : dict, optional
        ``{name: value}`` of the releases ``static.given`` names (public values given to the fit).
    """
    X = jnp.asarray(X, jnp.float32)
    chain = [(r, sigma_ref * ratio) for r, ratio in static.chain]
    return fit_chain(_InMemory(X, Y, mask, {}), static, chain, n, X.shape[1], Y.shape[1], key, sigma, learning_rate,
                     lr_ceiling, center_stages, given)


def preprocess_rows(plan: Plan, X, mean=None, scl=None, log_scale=None, *, values=None) -> jax.Array:
    """Rows as a fitted plan's model sees them (prediction uses this): from the released ``values`` by release name
    (:meth:`Plan.row_map`), or from the released mean, scaling and ``log_scale`` (the released log₂ R of a radial
    plan: its rows gain their radial coordinate first)."""
    if values is not None:
        mean, scl, log_scale = plan.row_map(values)
    if plan.radial and log_scale is None:
        raise ValueError("this plan's rows carry a radial coordinate: pass the released log2 row norm")
    rows = RowMap(None if mean is None else jnp.asarray(mean), scl,
                  None if log_scale is None or not plan.radial else jnp.float32(log_scale))
    return _model_rows_jit(jnp.asarray(X), rows, plan.clip, plan.normalize)


_model_rows_jit = jax.jit(model_rows, static_argnames=("norm", "normalize"))


@functools.partial(jax.jit, static_argnames=("static", "k"))
def _train_many(static, X, idx, mask, n, keys, sigmas, sigmas_ref, lrs, ceilings, stages, given=None, *, k):
    """:func:`train_rows` for S plans of one static form at once (``stages``: each plan's centering stages, see
    :func:`_shared_form`); the rows and the ``given`` values are shared (not batched)."""
    Y = jax.nn.one_hot(idx, k, dtype=jnp.float32)
    return jax.vmap(train_rows, in_axes=(None, None, None, None, None, 0, 0, 0, 0, 0, 0, None))(
        static, X, Y, mask, n, keys, sigmas, sigmas_ref, lrs, ceilings, stages, given)


def _shared_form(static: Static) -> Static:
    """What plans that run in one program have in common: plans whose chains differ only in how many stages the
    centering takes share a program whose centering has the most stages among them and keeps each plan's own
    (:meth:`privlin.releases.Centering.compute`): one pass over the rows per sum for all of them."""
    return static._replace(chain=tuple((dataclasses.replace(r, parts=0) if r.name == "center" else r, x)
                                       for r, x in static.chain))



# ----------------------------------------------------------------------------- run plans on a source

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
        Rows per block when streaming (fewer where a block would exceed :data:`BLOCK_BYTES`).
    memory_limit : int
        Bytes of rows held in memory (:func:`in_memory_bytes`); above it the rows are streamed.  Beside them, a call
        of the in-memory program runs as many settings as the rest allows (:func:`setting_bytes`: mapped rows of
        centered sgd/minibatch plans, the d x d matrices of whitening and curvature), at least one.
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
    rows = _Rows(source, classes, block_rows, verbose)
    out: list[Optional[Released]] = [None] * len(plans)
    fits = in_memory_bytes(source, len(classes)) <= memory_limit
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(plans):
        if p.secure_mode or not fits:
            continue
        groups.setdefault(_shared_form(p.static()), []).append(i)
    if groups:
        with progress.stage(f"reading {source.n} rows into memory", verbose):
            X, labels, mask = rows.load()
        spare = max(0, memory_limit - in_memory_bytes(source, len(classes)))
        _in_memory(plans, keys, groups, (X, labels, mask), float(source.n), len(classes), spare, verbose, out, given)
    rest = [i for i in range(len(plans)) if out[i] is None]
    for i, released in zip(rest, _stream(rows, [plans[i] for i in rest], [keys[i] for i in rest], given)):
        out[i] = released
    for r in out:  # exact sums of finite, clipped rows and finite noise: anything else is a bug, never released
        if not bool(jnp.isfinite(r.W).all() & jnp.isfinite(r.b).all()):  # on the device: no copy of W to the host
            raise RuntimeError("privlin produced non-finite weights (an internal error): nothing is released")
    return out


#: Estimated floating-point operations one call of the in-memory program may take (a few seconds on a 2-core
#: CPU): a group whose settings take more is run in several calls (:func:`setting_work`), so the progress line
#: moves between them and a call holds the (d, d) matrices of whitening and curvature of fewer settings at once.
CALL_WORK = 2e10


def max_settings(static: Static, m: int, d: int, k: int, spare: float) -> int:
    """How many settings of one form a call of :func:`_train_many` may run in the ``spare`` bytes ``memory_limit``
    leaves beside the rows (:func:`setting_bytes`; at least one).  The runner also keeps a call's estimated work
    under :data:`CALL_WORK` (:func:`setting_work`).  Running a group in more calls changes no setting's privacy:
    the rows are shared, each setting is its own slice of the vmapped program (its float32 arithmetic after the
    exact sums may round differently with the batch's size)."""
    held = setting_bytes(static, m, d, k)
    return max(1, int(spare // held) if held else 1 << 30)


def setting_work(static: Static, m: int, d: int, k: int) -> float:
    """Estimated floating-point operations of one setting on ``m`` rows of dimension ``d``: ``2·m·d`` per release's
    pass, adam1's class sums ``2·m·d·min(k, 32)``, a step's gradient ``4·m·d·k``, and for each (d, d) release
    (whitening, curvature) its exact second-moment sum ``2·m·d²`` and its eigendecomposition ``~10·d³``."""
    d_model = d + 1
    steps = 2.0 * m * d_model * min(max(k, 2), 32) if static.method == "adam1" else 4.0 * m * d_model * k * static.steps
    square = sum(1 for r, _ in static.chain if r.name in ("whiten", "curvature"))
    return 2.0 * m * d_model * len(static.chain) + steps + square * (2.0 * m * d_model**2 + 10.0 * d_model**3)


def setting_bytes(static: Static, m: int, d: int, k: int) -> float:
    """Bytes one setting adds while its call runs, beside the shared rows: its mapped float32 rows where a
    centered ``sgd``/``minibatch`` plan holds them (:meth:`_InMemory.mapped`; adam1 maps them chunk by chunk),
    and six float64 (d, d) matrices per (d, d) release (the sum, its noisy copy, the eigenvectors, the map)."""
    rows = 4.0 * m * d if static.centered and static.method != "adam1" else 0.0
    square = sum(1 for r, _ in static.chain if r.name in ("whiten", "curvature"))
    return rows + square * 6 * 8.0 * (d + 1) ** 2


def _calls(idx: list, per_call: int):
    """``idx`` cut into calls of equal length (one compiled shape): the last one repeats its last setting."""
    calls = -(-len(idx) // per_call)
    size = -(-len(idx) // calls)
    for a in range(0, len(idx), size):
        sel = idx[a:a + size]
        yield sel + [sel[-1]] * (size - len(sel))


def _in_memory(plans, keys, groups: dict, rows: tuple, n: float, k: int, spare: float, verbose: bool, out: list,
               given=None):
    """Run each group of plans of one form (``groups``: form → plan indices) on the loaded ``rows`` through its
    stored program, in calls cut to :data:`CALL_WORK` and ``spare`` bytes; results into ``out``; one progress line
    (:class:`privlin.progress.Fits`)."""
    X, labels, mask = rows
    statics = {form: plans[max(idx, key=lambda i: plans[i].center_stages)].static()  # the most centering stages
               for form, idx in groups.items()}
    work = {form: setting_work(statics[form], *X.shape, k) for form in groups}
    began: dict = {}
    with progress.Fits(sum(map(len, groups.values())), X.shape[0], verbose,
                       sum(work[form] * len(idx) for form, idx in groups.items())) as line:
        def phase(what):  # what progress shows, and when the program began to run (its compile excluded)
            line.phase(what)
            began[what] = time.perf_counter()

        for form, idx in groups.items():
            per_call = min(max(1, int(CALL_WORK // work[form])), max_settings(statics[form], *X.shape, k, spare))
            for sel in _calls(idx, per_call):
                got = jax.block_until_ready(compilation.call(  # the stored program (privlin.compilation)
                    _train_many, (statics[form],), X, labels, mask, n, jnp.stack([keys[i] for i in sel]),
                    *(jnp.asarray([v[i] for i in sel], jnp.float32) for v in _dynamic(plans)), given, k=k,
                    on_phase=phase))
                new = list(dict.fromkeys(sel))  # the last call repeats its last setting to keep one shape
                line.done(len(new), time.perf_counter() - began["running"], work[form] * len(new))
                for j, i in enumerate(new):
                    out[i] = Released(*(None if v is None else jax.tree.map(lambda a: a[j], v) for v in got))


def in_memory_bytes(source: Source, k: int) -> int:
    """What the in-memory path holds for one plan: the rows as read, on the host and on the device, their float32
    and preprocessed copies, and labels, one-hot labels and mask — what ``memory_limit`` is compared with
    (BENCHMARKS.md compares it with the measured peak)."""
    rows = _padded_len(_loaded_len(source.n_local_max))
    return rows * source.dim * (2 * source.itemsize + 8) + rows * (k + 2) * 4


def _dynamic(plans):
    return ([noise.sigma_float32(p.sigma) for p in plans], [noise.sigma_float32(p.reference_sigma) for p in plans],
            [p.learning_rate for p in plans], [p.learning_rate_ceiling for p in plans],
            [p.center_stages for p in plans])


# ----------------------------------------------------------------------------- rows from a source

def _row_sharding():
    """NamedSharding splitting rows over all devices, or None on a single device."""
    devices = jax.devices()
    if len(devices) == 1:
        return None
    mesh = jax.sharding.Mesh(np.array(devices), ("rows",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("rows"))


def _put_rows(*arrays):
    """Device arrays with rows sharded over ``jax.devices()`` (one data-parallel jit; GSPMD inserts the psum).

    ``make_array_from_process_local_data``: under ``jax.distributed`` each process passes its own rows and the
    global array spans all hosts.
    """
    sharding = _row_sharding()
    if sharding is None:
        return tuple(jax.device_put(a, may_alias=False) for a in arrays)  # faster than jnp.asarray on a CPU
    return tuple(jax.make_array_from_process_local_data(sharding, np.asarray(a)) for a in arrays)


def _padded_len(n: int) -> int:
    """Rows this process holds once padded: a multiple of its devices (of all devices on one process)."""
    nd = jax.local_device_count() if jax.process_count() > 1 else jax.device_count()
    return -(-n // nd) * nd


def _loaded_len(n: int) -> int:
    """Rows the in-memory path holds for ``n`` rows: whole chunks from 4 chunks on (at most a quarter more rows: see
    CHUNK_ROWS), below that the next power of two from 256 (at most twice the rows, all small).  Fixed shapes: one
    compiled program serves every small N of a bucket instead of one per N; null padding rows change no sum's bits
    (exact sums over the public N)."""
    if n >= 4 * sensitivity.CHUNK_ROWS:
        return -(-n // sensitivity.CHUNK_ROWS) * sensitivity.CHUNK_ROWS
    return max(256, 1 << (max(n, 1) - 1).bit_length())


def _pad(X, idx, mask, to: int):
    """Pad a block to ``to`` rows with zero rows of mask 0 (fixed shapes: one compilation)."""
    m = X.shape[0]
    if m < to:
        X = np.concatenate([X, np.zeros((to - m, X.shape[1]), X.dtype)])
        idx = np.concatenate([idx, np.zeros(to - m, idx.dtype)])
        mask = np.concatenate([mask, np.zeros(to - m, mask.dtype)])
    return X, idx, mask


class _Rows:
    """A source's rows as the runner consumes them: class indices, a mask of real rows, padded device blocks."""

    def __init__(self, source: Source, classes: np.ndarray, block_rows: int, verbose: bool):
        self.source, self.classes, self.verbose = source, classes, verbose
        self.block_rows = stream_block_rows(int(block_rows), source.dim * source.itemsize)
        self.k = len(classes)

    def host_blocks(self, page_locked: bool = False):
        """``(X, idx int32, mask float32)`` of every row counted in N: null rows (a store's skipped row, unknown
        label, non-finite value) zeroed and masked out."""
        for X, y, valid in self.source.fit_blocks(self.block_rows, page_locked=page_locked):
            idx, known = label_index(self.classes, y)
            if valid is not None:  # a store's skipped row (its features already zero): a null row
                known = known & valid
            if X.dtype not in (np.float16, np.float32):
                X = np.asarray(X, np.float32)
            if not self.source.finite:  # a store's writer refuses NaN/inf: only arrays need the pass
                finite = np.isfinite(X).all(axis=1)
                known = known & finite
                if not finite.all():
                    X = np.where(finite[:, None], X, 0).astype(X.dtype)
            yield X, idx, known.astype(np.float32)  # float16 stays float16 until the device: half the copy

    def load(self):
        """Every row at once: X (m, d), class index (m,), mask (m,), padded with null rows to a multiple of the
        device count and of whole chunks (under ``jax.distributed``: this process's rows, padded like every
        other process's).  One copy: the blocks are written into place."""
        rows = _padded_len(_loaded_len(self.source.n_local_max))
        X, idx, mask = None, np.zeros(rows, np.int32), np.zeros(rows, np.float32)
        at = 0
        for Xb, ib, mb in self.host_blocks():
            if X is None:
                X = np.zeros((rows, self.source.dim), Xb.dtype)
            m = Xb.shape[0]
            X[at:at + m], idx[at:at + m], mask[at:at + m] = Xb, ib, mb
            at += m
        if X is None:
            X = np.zeros((rows, self.source.dim), np.float32)
        return _put_rows(X, idx, mask)

    def device_blocks(self, desc: str | None, with_counts: bool = False):
        """Padded, sharded device blocks ``(X, idx, mask[, position of the block's first row])``.

        One process: a short last block is padded to TAIL_ROWS multiples, and positions count real rows (so a
        streamed Poisson sample equals the in-memory one).  Several processes: every process yields the same
        number of blocks of the same shape (empty ones where it has no more rows), and positions count the
        global padded stream.
        """
        multi = jax.process_count() > 1
        locked = _page_locked()
        count = self.source.block_count(self.block_rows) if multi else None
        size = _padded_len(self.source.block_size(self.block_rows)) if multi else None

        def padded():  # (padded host block, its row count)
            nonlocal size
            for X, idx, mask in self._host_blocks_padded_to(count, locked):
                m = X.shape[0]
                if not multi:
                    size = size or _padded_len(m)
                to = size if multi or m >= size else min(size, _padded_len(-(-m // TAIL_ROWS) * TAIL_ROWS))
                yield _pad(X, idx, mask, to), m

        position = 0
        for host, m in progress.bar(_read_ahead(padded()), desc, self.verbose, leave=False):
            block, to = _put_rows(*host), host[0].shape[0]
            if locked:  # the copy is an asynchronous DMA from the buffer the reader will reuse: let it finish
                jax.block_until_ready(block)
            yield (*block, position) if with_counts else block
            position += to * jax.process_count() if multi else m

    def _host_blocks_padded_to(self, count, page_locked: bool):
        """Host blocks, then empty ones up to ``count`` (None: as many as there are)."""
        produced = 0
        for block in self.host_blocks(page_locked):
            produced += 1
            yield block
        while count is not None and produced < count:
            produced += 1
            yield (np.zeros((0, self.source.dim), np.float32), np.zeros(0, np.int32), np.zeros(0, np.float32))


def _page_locked() -> bool:
    """Whether streamed blocks are read into page-locked host memory: where the default device is a CUDA GPU, which
    copies it by DMA several times faster than ordinary memory (BENCHMARKS.md, "Page-locked blocks").  Off
    where :data:`PAGE_LOCKED` is False or the reader cannot allocate it (then blocks stay in ordinary memory)."""
    if not PAGE_LOCKED or jax.default_backend() != "gpu":
        return False
    from stores import buffers  # privlin imports stores (and zarr) only where a store is read
    return buffers.can_page_lock()


def stream_block_rows(block_rows: int, row_bytes: int) -> int:
    """Rows per streamed block: ``block_rows``, cut so a block holds at most :data:`BLOCK_BYTES` of stored rows
    (a multiple of CHUNK_ROWS, the unit the kernels scan in)."""
    fit = BLOCK_BYTES // max(1, row_bytes) // sensitivity.CHUNK_ROWS * sensitivity.CHUNK_ROWS
    return max(1, min(block_rows, max(sensitivity.CHUNK_ROWS, fit)))


def _read_ahead(blocks: Iterator, depth: int = 1) -> Iterator:
    """The items of ``blocks``, produced by a background thread up to ``depth`` ahead of the consumer.

    Reading a store block (its threads checksum and copy) overlaps the device's work on the previous one and
    the host-to-device copy: a pass costs the slower of the two, not their sum.  An exception in the producer
    is raised here; a consumer that stops early stops the producer.
    """
    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce():
        try:
            for item in blocks:
                while not stop.is_set():
                    try:
                        items.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put((done, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            items.put((done, exc))
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="privlin-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, exc = items.get()
            if item is done:
                if exc is not None:
                    raise exc
                return
            yield item
            del item  # let the store reuse the block's buffer once the device is done with it
    finally:
        stop.set()
        while thread.is_alive():  # drain, so a producer blocked on a full queue sees the stop
            try:
                items.get(timeout=0.1)
            except queue.Empty:
                pass
        thread.join()


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


# ----------------------------------------------------------------------------- the streamed driver

def _stream(rows: _Rows, plans: list[Plan], keys: list, given=None) -> list[Released]:
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

    def __init__(self, rows: _Rows, plan: Plan, shared: dict):
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


def _pass(rows: "_Rows", what, block_fn, total, *args, labels=False, sample=None):
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
