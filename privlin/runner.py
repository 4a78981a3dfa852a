"""The one runner: a plan's chain run on rows with a key — the chain's releases (row norm, re-centering, centering,
scaling, curvature, and any added release: :mod:`privlin.releases`) → DP training.

Two drivers of the same chain, built from the same pieces (:mod:`privlin.preprocess`, :mod:`privlin.scaling`,
:mod:`privlin.train`) and the same key split (:func:`stage_keys`, :func:`release_key`):

* :func:`train_rows` — pure and jittable, on rows in memory.  ``jax.vmap`` runs many plans that share their
  compiled form (:meth:`Plan.static`) over one copy of the rows (the sweep), or one plan over many keys (the
  audit).
* :func:`run` — many plans on a :class:`privlin.data.Source`: rows that fit ``memory_limit`` are loaded once
  and handed to :func:`train_rows` (vmapped per group of plans); larger ones are streamed block by block
  (:func:`_stream`: one pass per statistic, two blocks in flight; one pass per step for ``sgd``/``minibatch``);
  ``secure_mode`` releases every statistic on the host with the discrete Gaussian.  Rows are sharded over
  ``jax.devices()`` (and over hosts under ``jax.distributed``); every noise draw is made once, on the global sum.

The chain's head — the generic releases, whose exact sums read the rows as given (the row norm; added releases)
— is one loop in both drivers (:func:`train_rows`, :func:`_head`).  The later releases each depend on the rows as
the earlier ones left them and still have a streamed form of their own (:func:`_centering`, :func:`_scaling`,
:func:`_curvature`); the equivalence tests keep the two drivers in step.

Rows whose label is not in the public class list, rows with a non-finite value, and a store's rows skipped at
extraction (counted in N) are null rows: they contribute nothing (the zero-out relation), and nothing about
them is reported.  Every sum is divided by the public N, never by a count of rows.
"""
from __future__ import annotations

import functools
import queue
import threading
import zlib
from typing import Iterator, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import compilation, noise, preprocess, progress, radius, scaling, secure_noise, sensitivity, train
from .data import Source, label_index
from .plan import Plan, Static, learning_rates

__all__ = ["Released", "train_rows", "run", "stage_keys", "TAIL_ROWS"]

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
    """Everything a fit releases: weights ``W`` (d', k), intercept ``b`` (k,), the noisy mean (d',) or None, the
    scaling stage's map (:class:`privlin.scaling.Scaling`) or None, the curvature bound (a scalar, from
    :func:`privlin.scaling.release_curvature`) or None, log₂ of the typical row norm (a scalar, from
    :func:`privlin.radius.release_log_scale`) or None; d' = ``Plan.model_dim``."""

    W: jax.Array
    b: jax.Array
    mean: Optional[jax.Array]
    scaling: Optional[scaling.Scaling] = None
    curvature: Optional[jax.Array] = None
    radius: Optional[jax.Array] = None
    extra: Optional[dict] = None  # {name: value} of the added releases (privlin.releases.ADDED)


def stage_keys(key) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(centering key, scaling key, training key) of a fit's key: the one key split of privlin."""
    keys = noise.split_named(key, "center", "train", "scale")
    return keys["center"], keys["scale"], keys["train"]


_KEYED = ("center", "train", "scale", "curvature", "radius", "center-refine", "recenter", "added")


def release_key(key, name: str) -> jax.Array:
    """The key of a later release (``"curvature"``, ``"radius"``, ``"center-refine"``, ``"recenter"``) of a fit's
    key: the 4th to 7th of the same split (JAX's partitionable threefry makes a split's first keys independent of
    how many follow, so :func:`stage_keys` and the earlier releases' keys are unchanged by them).  An added
    release's key is its name's CRC-32 folded into the 8th."""
    if name in _KEYED:
        return noise.split_named(key, *_KEYED)[name]
    return noise.fold_in(noise.split_named(key, *_KEYED)["added"], zlib.crc32(name.encode()) & 0x7FFFFFFF)


def _recenter_keys(key, rounds: int) -> jax.Array:
    """One key per re-centering round (:func:`privlin.preprocess.round_means`), from the fit's key."""
    return noise.split(release_key(key, "recenter"), rounds)


# ----------------------------------------------------------------------------- the pure core

def train_rows(static: Static, X, Y, mask, n, key, sigma, sigma_ref, learning_rate,
               lr_ceiling=float("nan")) -> Released:
    """Run one plan on in-memory rows; pure, jittable, vmappable over (key, σ, σ_ref, lr, lr ceiling).

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
    """
    method, steps, q, clip, normalize = static.method, static.steps, static.sample_rate, static.clip, static.normalize
    loss, bias_init, fit_intercept = static.loss, static.bias_init, static.fit_intercept
    optimizer, momentum = static.optimizer, static.momentum

    def sigma_of(name):  # the release's σ, or None where it is not made
        got = static.release(name)
        return None if got is None else sigma_ref * got[1]

    k_center, k_scale, k_train = stage_keys(key)
    X = jnp.asarray(X, jnp.float32)
    dim = X.shape[1] + sum(r.adds_dims for r, _ in static.chain)  # the model's inputs (Plan.model_dim)
    mean = scl = None
    values = {}
    for r, ratio in static.chain:  # ---- the chain's head: releases whose sum reads the rows as given
        if r.generic:
            total = sensitivity.chunked(lambda t, x, m, r=r: r.block_sum(t, x, m, n), r.init(X.shape[1]), X, mask)
            values[r.name] = r.release(total, n, release_key(key, r.name), sigma_ref * ratio)
    log_scale = values.pop("radius", None)  # the rows gain their radial coordinate (privlin.radius)
    centered = static.centered
    if centered:
        def sum_of(rounds):
            return sensitivity.chunked(lambda t, x, m: t + preprocess.row_sum(x, m, clip, n, log_scale, rounds),
                                       jnp.zeros(dim, jnp.float64), X, mask)

        rounds = None
        if static.release("recenter") is not None:  # ---- the re-centering rounds (privlin.preprocess.round_means)
            count = static.release("recenter")[0].rounds
            rounds = preprocess.round_means(sum_of, n, _recenter_keys(key, count), sigma_of("recenter"), count, clip)

        def offsets_of(first, r):
            return sensitivity.chunked(
                lambda t, x, m: t + preprocess.offset_sum(x, m, first, r, n, clip, log_scale, rounds),
                jnp.zeros(dim, jnp.float64), X, mask)

        mean = preprocess.staged_mean(sum_of(rounds), offsets_of, n, (k_center, release_key(key, "center-refine")),
                                      sigma_of("center"), static.release("center")[0].stages, clip, dim)
        mean = _chain(rounds, mean)
    if static.release("scale") is not None:  # ---- the scaling stage (privlin.scaling), on the centered rows
        scl = _scaling_in_memory(X, mask, n, k_scale, mean, normalize, sigma_of("scale"), sigma_of("whiten"),
                                 log_scale, dim)
    curv, intercept_scale = None, 1.0
    Xp = None if method == "adam1" else _prep(X, clip, normalize, mean, scl, log_scale)  # adam1: chunk by chunk
    if static.release("curvature") is not None:  # ---- lifts W's rate (sgd optimizer only: never adam1)
        curv = scaling.release_curvature(
            sensitivity.chunked(lambda t, x, m: t + scaling.second_moment_sum(x, m, n),
                                jnp.zeros((dim, dim), jnp.float64), Xp, mask),
            n, release_key(key, "curvature"), sigma_of("curvature"))
        learning_rate, intercept_scale = _lifted_rates(lr_ceiling, curv, momentum, clip, fit_intercept)
    if method == "adam1":
        def add(acc, x, y, m):
            return train.class_sums_update(acc, _prep(x, clip, normalize, mean, scl, log_scale), y, m, clip, n,
                                           loss=loss,
                                           bias_init=bias_init, fit_intercept=fit_intercept, row_norm=clip if normalize else None)
        sums = sensitivity.chunked(add, train.class_sums_init(dim, Y.shape[1]), X, Y, mask)
        params = train.adam1_step(sums, n, k_train, sigma, learning_rate, clip=clip, loss=loss, bias_init=bias_init,
                                  fit_intercept=fit_intercept)
    elif method == "sgd":
        params = train.fit_full_batch(Xp, Y, mask, n, k_train, sigma, learning_rate, steps=steps, clip=clip,
                                      loss=loss, optimizer=optimizer, momentum=momentum,
                                      fit_intercept=fit_intercept, bias_init=bias_init, row_norm=clip if normalize else None,
                                      intercept_scale=intercept_scale)
    else:
        params = train.fit_minibatch(Xp, Y, mask, n, k_train, sigma, learning_rate, steps=steps, sample_rate=q,
                                     clip=clip, loss=loss, optimizer=optimizer, momentum=momentum,
                                     fit_intercept=fit_intercept, bias_init=bias_init, row_norm=clip if normalize else None,
                                     intercept_scale=intercept_scale)
    return Released(params.W, params.b, mean, scl, curv, log_scale, values)


def _chain(rounds, mean):
    """The released means as :func:`privlin.preprocess.apply` takes them: the centering's alone, or after the
    re-centering rounds' (R + 1, d')."""
    return mean if rounds is None else jnp.concatenate([rounds, mean[None]])


def _lifted_rates(ceiling, curvature, momentum, clip, fit_intercept):
    """(W's rate, intercept's rate / W's) from a released curvature bound (:func:`privlin.plan.learning_rates`);
    the intercept's rate is applied by scaling its gradient (:func:`privlin.train.noisy_update`)."""
    lr_w, lr_b = learning_rates(ceiling, curvature, momentum=momentum, clip=clip, fit_intercept=fit_intercept)
    return lr_w, lr_b / lr_w


def _prep(X, clip, normalize, mean, scl=None, log_scale=None):
    """Rows as the model sees them: normalized to ``clip`` (with a released ``log_scale``: with their radial
    coordinate, :func:`privlin.radius.embed`), centered by the released mean and normalized again, then (with a
    released scaling) standardized and whitened, at norm ``clip``."""
    if not normalize:
        return jnp.asarray(X, jnp.float32)
    if scl is None:
        return preprocess.apply(X, preprocess.RowMap(clip, mean, log_scale))
    return scaling.apply(preprocess.apply(X, preprocess.RowMap(1.0, mean, log_scale)), scl, clip)


def preprocess_rows(plan: Plan, X, mean, scl=None, log_scale=None) -> jax.Array:
    """Rows as a fitted plan's model sees them (prediction uses this); ``log_scale``: the released log₂ R of a
    radial plan (its rows gain their radial coordinate first)."""
    if plan.radial and log_scale is None:
        raise ValueError("this plan's rows carry a radial coordinate: pass the released log2 row norm")
    return _prep_jit(jnp.asarray(X), plan.clip, plan.normalize, None if mean is None else jnp.asarray(mean), scl,
                     None if log_scale is None or not plan.radial else jnp.float32(log_scale))


_prep_jit = jax.jit(_prep, static_argnames=("clip", "normalize"))


@functools.partial(jax.jit, static_argnames=("static", "k"))
def _train_many(static, X, idx, mask, n, keys, sigmas, sigmas_ref, lrs, ceilings, *, k):
    """:func:`train_rows` for S plans of one static form at once; the rows are shared (not batched)."""
    Y = jax.nn.one_hot(idx, k, dtype=jnp.float32)
    return jax.vmap(train_rows, in_axes=(None, None, None, None, None, 0, 0, 0, 0, 0))(
        static, X, Y, mask, n, keys, sigmas, sigmas_ref, lrs, ceilings)


# ----------------------------------------------------------------------------- run plans on a source

def run(plans: Sequence[Plan], source: Source, keys: Sequence, classes: np.ndarray, *, block_rows: int = 65536,
        memory_limit: int = 2**30, verbose: bool = False) -> list[Released]:
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
        Bytes of float32 rows (per plan group, counting the centered copies of a vmapped group) kept in memory;
        above it the rows are streamed.
    verbose : bool
        Show each stage that runs more than a few seconds (:mod:`privlin.progress`).
    """
    compilation.enable()  # JAX's persistent compilation cache, once (privlin.compilation)
    with sensitivity.x64():
        return _run(list(plans), source, keys, classes, block_rows, memory_limit, verbose)


def _run(plans, source, keys, classes, block_rows, memory_limit, verbose) -> list[Released]:
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
        groups.setdefault(p.static(), []).append(i)
    if groups:
        with progress.stage(f"reading {source.n} rows into memory", verbose):
            X, labels, mask = rows.load()
        spare = max(0, memory_limit - in_memory_bytes(source, len(classes)))
        for static, idx in groups.items():
            per_plan = X.size * 4 if static.centered else 0  # a centered plan holds its own centered copy
            chunk = max(1, int(spare // per_plan)) if per_plan else len(idx)
            for a in range(0, len(idx), chunk):
                sel = idx[a:a + chunk]
                program = (static, X.shape, str(X.dtype), len(sel), len(classes))  # what _train_many compiles for
                with progress.stage(progress.in_memory(program, sel, len(plans), X.shape[0]), verbose):
                    got = jax.block_until_ready(compilation.call(  # the stored program (privlin.compilation)
                        _train_many, (static,), X, labels, mask, float(source.n), jnp.stack([keys[i] for i in sel]),
                        *(jnp.asarray([v[i] for i in sel], jnp.float32) for v in _dynamic(plans)), k=len(classes)))
                for j, i in enumerate(sel):
                    out[i] = Released(*(None if v is None else jax.tree.map(lambda a: a[j], v) for v in got))
    rest = [i for i in range(len(plans)) if out[i] is None]
    for i, released in zip(rest, _stream(rows, [plans[i] for i in rest], [keys[i] for i in rest])):
        out[i] = released
    for r in out:  # exact sums of finite, clipped rows and finite noise: anything else is a bug, never released
        if not bool(jnp.isfinite(r.W).all() & jnp.isfinite(r.b).all()):  # on the device: no copy of W to the host
            raise RuntimeError("privlin produced non-finite weights (an internal error): nothing is released")
    return out


def in_memory_bytes(source: Source, k: int) -> int:
    """What the in-memory path holds for one plan: the rows as read, on the host and on the device, their float32
    and preprocessed copies, and labels, one-hot labels and mask — what ``memory_limit`` is compared with
    (BENCHMARKS.md compares it with the measured peak)."""
    rows = _padded_len(_loaded_len(source.n_local_max))
    return rows * source.dim * (2 * source.itemsize + 8) + rows * (k + 2) * 4


def _dynamic(plans):
    return ([p.sigma for p in plans], [p.reference_sigma for p in plans],
            [p.learning_rate for p in plans], [p.learning_rate_ceiling for p in plans])


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


# ----------------------------------------------------------------------------- streaming

def _pass(rows: "_Rows", what: str, block_fn, total, *args, **kwargs):
    """One pass over the rows (progress label ``what``): ``total = block_fn(total, X, mask, *args, **kwargs)``
    block by block, double-buffered (:func:`_double_buffered`); every streamed statistic is one of these."""
    def sums(total=total):
        for X, _, mask in rows.device_blocks(what):
            total = block_fn(total, X, mask, *args, **kwargs)
            yield total
    return _double_buffered(sums())


@functools.partial(jax.jit, static_argnames=("clip",))
def _row_sum_block(total, X, mask, clip, n, log_scale=None, rounds=None):
    return sensitivity.chunked(lambda t, x, m: t + preprocess.row_sum(x, m, clip, n, log_scale, rounds), total, X,
                               mask)


@functools.partial(jax.jit, static_argnames=("clip",))
def _offset_sum_block(total, X, mask, first, r, n, clip, log_scale=None, rounds=None):
    return sensitivity.chunked(lambda t, x, m: t + preprocess.offset_sum(x, m, first, r, n, clip, log_scale, rounds),
                               total, X, mask)


@functools.partial(jax.jit, static_argnames=("k", "clip", "normalize", "loss", "bias_init", "fit_intercept"))
def _class_sums_block(acc, X, idx, mask, mean, scl, log_scale, n, *, k, clip, normalize, loss, bias_init,
                      fit_intercept):
    def update(a, x, i, m):
        return train.class_sums_update(a, _prep(x, clip, normalize, mean, scl, log_scale), jax.nn.one_hot(i, k), m,
                                       clip, n,
                                       loss=loss, bias_init=bias_init, fit_intercept=fit_intercept,
                                       row_norm=clip if normalize else None)
    return sensitivity.chunked(update, acc, X, idx, mask)


@functools.partial(jax.jit, static_argnames=("k", "clip", "normalize", "loss", "fit_intercept"))
def _grad_block(acc, params, X, idx, mask, mean, scl, log_scale, n, *, k, clip, normalize, loss, fit_intercept):
    def update(a, x, i, m):
        g = train.clipped_grad_sum(params, _prep(x, clip, normalize, mean, scl, log_scale), jax.nn.one_hot(i, k), m,
                                   clip, n,
                                   loss=loss, fit_intercept=fit_intercept, row_norm=clip if normalize else None)
        return jax.tree.map(jnp.add, a, g)
    return sensitivity.chunked(update, acc, X, idx, mask)


@functools.partial(jax.jit, static_argnames=("loss", "bias_init", "fit_intercept"))
def _adam1_release_many(sums, n, keys, sigmas, lrs, clip, *, loss, bias_init, fit_intercept):
    """adam1's data-free stage for S plans sharing one class-sum pass (vmapped over key, σ, lr)."""
    def one(key, sigma, lr):
        k_train = stage_keys(key)[-1]
        return train.adam1_step(sums, n, k_train, sigma, lr, clip=clip, loss=loss, bias_init=bias_init,
                                fit_intercept=fit_intercept)
    return jax.vmap(one)(keys, sigmas, lrs)


_sample = jax.jit(train.poisson_mask, static_argnames=("length", "sample_rate"))  # q: the accountant's float


@functools.partial(jax.jit, static_argnames=("optimizer", "fit_intercept"))
def _noisy_step(state, grad_sum, key, sigma, denom, lr, momentum, clip, intercept_scale, *, optimizer, fit_intercept):
    opt = train.make_optimizer(optimizer, lr, momentum=momentum)
    return train.noisy_update(state, grad_sum, key, sigma, denom, opt, clip=clip, fit_intercept=fit_intercept,
                              intercept_scale=intercept_scale)


def _stream(rows: _Rows, plans: list[Plan], keys: list) -> list[Released]:
    """Plans whose rows do not fit in memory, or in secure mode: block by block."""
    out: list[Optional[Released]] = [None] * len(plans)
    heads = _head(rows, plans, keys)
    logs = [h.pop("radius", None) for h in heads]
    means = _centering(rows, plans, keys, logs)
    scls = _scaling(rows, plans, keys, means, logs)
    curvs = _curvature(rows, plans, keys, means, scls, logs)
    # adam1 without centering: one class-sum pass for every plan of the same static form
    shared: dict[tuple, list[int]] = {}
    for i, p in enumerate(plans):
        if p.method == "adam1" and not p.chain and not p.secure_mode:
            shared.setdefault(p.static(), []).append(i)
    for idx in shared.values():
        p = plans[idx[0]]
        sums = _class_sums(rows, p, None)
        got = _adam1_release_many(sums, float(p.n), jnp.stack([keys[i] for i in idx]),
                                  jnp.asarray([plans[i].sigma for i in idx], jnp.float32),
                                  jnp.asarray([plans[i].learning_rate for i in idx], jnp.float32), p.clip,
                                  loss=p.loss, bias_init=p.bias_init, fit_intercept=p.fit_intercept)
        for j, i in enumerate(idx):
            out[i] = Released(got.W[j], got.b[j], None, extra={})
    for i, p in enumerate(plans):
        if out[i] is not None:
            continue
        k_train = stage_keys(keys[i])[-1]
        if p.method == "adam1":
            sums = _class_sums(rows, p, means[i], scls[i], logs[i])
            if p.secure_mode:
                g = _secure_release(train.adam1_gradient(sums, loss=p.loss, bias_init=p.bias_init), p)
                params = train.adam1_update(g, p.n, p.learning_rate, bias_init=p.bias_init,
                                            fit_intercept=p.fit_intercept)
            else:
                params = train.adam1_step(sums, p.n, k_train, p.sigma, p.learning_rate, clip=p.clip, loss=p.loss,
                                          bias_init=p.bias_init, fit_intercept=p.fit_intercept)
        else:
            params = _stream_steps(rows, p, k_train, means[i], scls[i], curvs[i], logs[i])
        out[i] = Released(params.W, params.b, means[i], scls[i], curvs[i], logs[i], heads[i])
    return out


@functools.lru_cache(maxsize=None)
def _head_block(release):
    """A generic release's block sum, compiled once per release value."""
    return jax.jit(lambda total, X, mask, n: sensitivity.chunked(
        lambda t, x, m: release.block_sum(t, x, m, n), total, X, mask))


def _head(rows: _Rows, plans: list[Plan], keys: list) -> list[dict]:
    """``{name: released value}`` of every plan's generic releases (the chain's head: their sums read the rows as
    given, so one pass per release value serves every plan); the same releases :func:`train_rows` makes, with the
    same keys; in secure mode drawn on the host with the discrete Gaussian."""
    out: list[dict] = [{} for _ in plans]
    totals: dict = {}
    for i, p in enumerate(plans):
        for r, sigma in p.chain:
            if not r.generic:
                continue
            if r not in totals:
                totals[r] = _pass(rows, r.name, _head_block(r), r.init(p.dim), float(p.n))
            out[i][r.name] = r.release(totals[r], float(p.n), release_key(keys[i], r.name), sigma,
                                       _host_noise(p, r.name, totals[r]))
    return out


def _centering(rows: _Rows, plans: list[Plan], keys: list, logs: list) -> list:
    """The released mean (or chain of means, :func:`_chain`) of every centered plan; one row-sum pass per clip norm
    (and released R), and one per re-centering round of each plan that makes them (its rows depend on its own
    earlier rounds)."""
    means: list = [None] * len(plans)
    totals: dict[tuple, jax.Array] = {}
    for i, p in enumerate(plans):
        if not p.centered:
            continue

        def sum_of(rounds, p=p, log_scale=logs[i], what="centering"):
            return _pass(rows, what, _row_sum_block, jnp.zeros(p.model_dim, jnp.float64), p.clip, float(p.n),
                         log_scale, rounds)

        rounds = None
        if p.recentered:  # never in secure mode (make_plan)
            rounds = preprocess.round_means(functools.partial(sum_of, what="re-centering"), p.n,
                                            _recenter_keys(keys[i], p.recenter_rounds), p.sigma_recenter,
                                            p.recenter_rounds, p.clip)
            total = sum_of(rounds)
        else:
            group = (p.clip, None if logs[i] is None else float(logs[i]))
            if group not in totals:
                totals[group] = sum_of(None)
            total = totals[group]
        if p.secure_mode:  # one stage (make_plan)
            means[i] = preprocess.private_mean(total, p.n, None, p.sigma_center, p.clip,
                                               noisy=_host_noise(p, "center", total))
            continue

        def offsets_of(first, r, p=p, log_scale=logs[i], rounds=rounds):  # the refining stage: a pass of its own
            return _pass(rows, "centering, refined", _offset_sum_block, jnp.zeros(p.model_dim, jnp.float64), first,
                         r, float(p.n), p.clip, log_scale, rounds)

        means[i] = _chain(rounds, preprocess.staged_mean(total, offsets_of, p.n, (stage_keys(keys[i])[0],
                                          release_key(keys[i], "center-refine")), p.sigma_center, p.center_stages,
                                          p.clip, p.model_dim))
    return means


# ---- the scaling stage (privlin.scaling): one pass for the moments, one for the whitening sum

def _moments_add(total, X, mask, mean, log_scale, n, normalize):
    return total + scaling.moment_sums(_prep(X, 1.0, normalize, mean, None, log_scale), mask, n)


def _second_moment_add(total, X, mask, mean, log_scale, shift, scale, n, normalize):
    return total + scaling.second_moment_sum(
        scaling.standardized(_prep(X, 1.0, normalize, mean, None, log_scale), shift, scale), mask, n)


_moments_block = jax.jit(_moments_add, static_argnames=("normalize",))
_second_moment_block = jax.jit(_second_moment_add, static_argnames=("normalize",))


def _host_noise(p: Plan, name: str, value):
    """Secure mode's release of ``value`` (an exact sum) by mechanism ``name``: the discrete Gaussian drawn on the
    host from ``os.urandom`` with the plan's table (:meth:`Plan.secure_table`); None outside secure mode, where the
    release draws its own noise from its key.  The one place the streamed driver's noise differs."""
    if not p.secure_mode:
        return None
    std, sens, bound = p.secure_table()[name]
    return secure_noise.secure_gaussian_release(np.asarray(value, np.float64), std, sens, bound=bound)


def _scaling_in_memory(X, mask, n, key, mean, normalize, sigma_m, sigma_w, log_scale, dim):
    """The stage's releases on in-memory rows (traced inside :func:`train_rows`; 4096-row chunks); ``dim``: the
    model's inputs, as :func:`train_rows` derived them."""
    k_moments, k_rotate = noise.split(key)
    sums = sensitivity.chunked(lambda t, x, m: _moments_add(t, x, m, mean, log_scale, n, normalize),
                               jnp.zeros((2, dim), jnp.float64), X, mask)
    shift, scale = scaling.release_moments(sums, n, k_moments, sigma_m)
    rotate = None
    if sigma_w is not None:
        M = sensitivity.chunked(lambda t, x, m: _second_moment_add(t, x, m, mean, log_scale, shift, scale, n,
                                                                   normalize),
                                jnp.zeros((dim, dim), jnp.float64), X, mask)
        rotate = scaling.release_rotation(M, n, k_rotate, sigma_w)
    return scaling.Scaling(shift, scale, rotate)


def _scaling(rows: _Rows, plans: list[Plan], keys: list, means: list, logs: list) -> list:
    """The released scaling map of every scaled plan, streamed (two passes each: its rows depend on its own noisy
    mean); the same releases as :func:`_scaling_in_memory`, with the same key split."""
    out: list = [None] * len(plans)
    for i, p in enumerate(plans):
        if not p.scaled:
            continue
        k_moments, k_rotate = noise.split(stage_keys(keys[i])[1])
        n = float(p.n)
        sums = _pass(rows, "scaling", _moments_block, jnp.zeros((2, p.model_dim), jnp.float64), means[i], logs[i], n,
                     normalize=p.normalize)
        shift, scale = scaling.release_moments(sums, n, k_moments, p.sigma_scale, _host_noise(p, "scale", sums))
        rotate = None
        if p.whitened:
            M = _pass(rows, "scaling", _second_moment_block, jnp.zeros((p.model_dim,) * 2, jnp.float64), means[i],
                      logs[i], shift, scale, n, normalize=p.normalize)
            rotate = scaling.release_rotation(M, n, k_rotate, p.sigma_whiten, _host_noise(p, "whiten", scaling.upper(M)))
        out[i] = scaling.Scaling(shift, scale, rotate)
    return out


def _curvature_add(total, X, mask, mean, scl, log_scale, n, *, clip, normalize):
    return total + scaling.second_moment_sum(_prep(X, clip, normalize, mean, scl, log_scale), mask, n)


_curvature_block = jax.jit(_curvature_add, static_argnames=("clip", "normalize"))


def _curvature(rows: _Rows, plans: list[Plan], keys: list, means: list, scls: list, logs: list) -> list:
    """The released curvature bound of every plan that buys it (one pass each, over its own training rows); the
    same release as :func:`train_rows` makes, with the same key."""
    out: list = [None] * len(plans)
    for i, p in enumerate(plans):
        if not p.curved:
            continue
        n = float(p.n)

        M = _pass(rows, "curvature", _curvature_block, jnp.zeros((p.model_dim,) * 2, jnp.float64), means[i], scls[i],
                  logs[i], n, clip=p.clip, normalize=p.normalize)
        noisy = _host_noise(p, "curvature", [scaling.top_eigenvalue(M)]) if p.secure_mode else None
        out[i] = scaling.release_curvature(M, n, release_key(keys[i], "curvature"), p.sigma_curvature,
                                           None if noisy is None else noisy[0])
    return out


def _class_sums(rows: _Rows, p: Plan, mean, scl=None, log_scale=None):
    acc = train.class_sums_init(p.model_dim, p.n_classes)

    def sums():
        nonlocal acc
        for X, idx, mask in rows.device_blocks("adam1 pass"):
            acc = _class_sums_block(acc, X, idx, mask, mean, scl, log_scale, float(p.n), k=p.n_classes, clip=p.clip,
                                    normalize=p.normalize, loss=p.loss, bias_init=p.bias_init,
                                    fit_intercept=p.fit_intercept)
            yield acc

    _double_buffered(sums())
    return acc


def _stream_steps(rows: _Rows, p: Plan, key, mean, scl=None, curv=None, log_scale=None):
    """sgd / minibatch one pass over the rows per step (the streamed form of train.fit_full_batch/fit_minibatch)."""
    q = p.sample_rate
    lr, intercept_scale = p.learning_rate, 1.0
    if curv is not None:
        lr, intercept_scale = _lifted_rates(p.learning_rate_ceiling, curv, p.momentum, p.clip, p.fit_intercept)
    opt = train.make_optimizer(p.optimizer, lr, momentum=p.momentum)
    state = train.init_state(p.model_dim, p.n_classes, opt, p.bias_init)
    denom = q * p.n  # public: expected (q<1) or exact (q=1) batch size
    for step_key in progress.bar(noise.split(key, p.steps), f"{p.method} steps", rows.verbose):
        # full batch: the step key is the noise key, exactly as in train.fit_full_batch
        k_sample, k_noise = noise.split(step_key) if q < 1.0 else (None, step_key)
        g = train.LinearParams(jnp.zeros((p.model_dim, p.n_classes), jnp.float64),
                               jnp.zeros((p.n_classes,), jnp.float64))

        def grad_sums():
            nonlocal g
            for X, idx, mask, start in rows.device_blocks(None, with_counts=True):
                if q < 1.0:  # the same sample as train.fit_minibatch: a function of the row's global position
                    mask = mask * _sample(k_sample, q, start, mask.shape[0])
                g = _grad_block(g, state.params, X, idx, mask, mean, scl, log_scale, float(p.n), k=p.n_classes,
                                clip=p.clip,
                                normalize=p.normalize, loss=p.loss, fit_intercept=p.fit_intercept)
                yield g

        _double_buffered(grad_sums())
        sigma = p.sigma
        if p.secure_mode:  # released here with the discrete Gaussian; nothing more to add in the update
            g, sigma = _secure_release(g, p), 0.0
        state = _noisy_step(state, g, k_noise, sigma, denom, lr, p.momentum, p.clip, intercept_scale,
                            optimizer=p.optimizer, fit_intercept=p.fit_intercept)
    return state.params


def _secure_release(g: train.LinearParams, p: Plan) -> train.LinearParams:
    """A clipped gradient sum released with the discrete Gaussian (W and b as one vector when b is trained)."""
    W, b = np.asarray(g.W, np.float64), np.asarray(g.b, np.float64)
    flat = np.concatenate([W.ravel(), b]) if p.fit_intercept else W.ravel()
    noisy = _host_noise(p, "step", flat)
    return train.LinearParams(jnp.asarray(noisy[:W.size].reshape(W.shape), jnp.float32),
                              jnp.asarray(noisy[W.size:], jnp.float32) if p.fit_intercept else g.b)
