"""Released sums whose sensitivity holds in the arithmetic that computes them.

A sum of clipped contributions accumulated in float32 is not a sum of contributions of norm ≤ C: rounding
inside it grows like N·2⁻²⁴, and one crafted row can move a blocked float32 sum of 2²⁰ unit rows by 1.04·C
(Casacuberta et al., CCS 2022).  Here every released sum is exact:

1. each contribution is computed in float32 and clipped to ``C·(1 − η)`` — ``η`` (:func:`margin`) covers the
   worst-case rounding of its norm and of step 2, so the contribution *as summed* has norm ≤ C;
2. it is snapped to a power-of-two grid: a vector contribution to integers of at most 2²² steps (rounded in
   float32, where they are exact), the two factors of an outer product to grids fine enough that N of their
   products sum to integers below 2⁵² (:func:`grid_bits`, from the public N only);
3. the snapped values are summed in float64, where every partial sum is an integer below 2⁵²: the result is
   exact in any order — streamed, blocked, sharded over devices or hosts, vmapped (N ≤ 2³⁰, checked).

So one row moves a released sum by at most C, exactly as accounted, and the same rows give bitwise the same
sum on every path.  Products for the gradient of a linear model (a row direction ⊗ a clipped residual) are
snapped factor by factor (:func:`outer_sum`); float64 products of the snapped integers are exact too.

Sums of rows' offsets from a public center, each scaled by a weight that depends on its length (a clipped offset,
a row centered and re-normalized), are snapped the same way but factored (:func:`offsets_sum`): the rows and the
center to one grid, the weights to another.  What depends on the center is then two matrix products with the
snapped rows, so the settings of a sweep (one center each, vmapped) share one pass over the rows instead of
each making its own centered copy.

Every function here is traced under ``jax.enable_x64`` (the runner enters it): float64 must not silently be
float32.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

__all__ = ["U32", "grid_bits", "margin", "vector_sum", "outer_sum", "offsets_sum", "pow2_64", "directions", "directions_and_log2_norms", "require_x64",
           "scaled_rows", "x64"]

#: Unit roundoff of float32.
U32 = 2.0**-24
#: Integers exactly representable in float64 (with one bit to spare for the sign of partial sums).
_F64_BITS = 52


def x64():
    """The context every exact sum is traced in (float64 and int64 enabled, thread-locally)."""
    return jax.enable_x64(True)


def grid_bits(n) -> jax.Array:
    """Bits of grid resolution per snapped value so that n values of magnitude ≤ 1 sum below 2⁵² in any order."""
    require_x64()
    return _F64_BITS - 1 - jnp.ceil(jnp.log2(jnp.maximum(jnp.asarray(n, jnp.float64), 2.0)))


#: Grid steps per unit of bound for a snapped vector contribution: |q| ≤ 2²² + 1 is an integer float32 holds
#: exactly, and 2³⁰ of them sum below 2⁵², exactly, in float64.
VECTOR_BITS = 22
#: The most rows an exact vector sum holds (public check before any charge).
MAX_ROWS = 2**30


def margin(n, dims: int, *, outer_dims: int = 0) -> jax.Array:
    """Relative shrink η of the clip so that a contribution *as summed* has norm ≤ C.

    ``dims``: length of a vector contribution (or of the row direction of an outer product); ``outer_dims``:
    length of the other factor of an outer product (0 for vectors).  Covers float32 rounding of the norms and
    of the products that form the contribution, ``(dims + outer_dims + 16)·2⁻²⁴``, and the snapping,
    ``√dims·2^-(b+1)`` (+ ``√outer_dims·2^-(b'+1)`` for the other factor).
    """
    rounding = (dims + outer_dims + 16) * U32
    if not outer_dims:
        return rounding + math.sqrt(dims) * 2.0**-VECTOR_BITS  # floor(x + ½) is within one step of x
    bits = grid_bits(n)
    ba, bb = _split_bits(bits, dims, outer_dims)
    return rounding + math.sqrt(dims) * jnp.exp2(-ba - 1) + 1.01 * math.sqrt(outer_dims) * jnp.exp2(-bb - 1)


#: Rows per step of a long sum: every temporary (normalized rows, snapped values) stays this small instead of a
#: copy of all rows per stage (which on a CPU costs more than the arithmetic).  Exact sums make the result the
#: same bits whatever the chunking.
CHUNK_ROWS = 2048


def in_chunks(m: int) -> bool:
    """Whether :func:`chunked` steps over ``m`` rows chunk by chunk (else one call): from 2 whole chunks on."""
    return m % CHUNK_ROWS == 0 and m >= 2 * CHUNK_ROWS


def chunked(fn, acc, *rows):
    """``acc = fn(acc, *chunk)`` over CHUNK_ROWS-row chunks of equally long row arrays (``lax.scan``); one call
    when the rows are few or not a multiple of CHUNK_ROWS."""
    m = rows[0].shape[0]
    if not in_chunks(m):
        return fn(acc, *rows)
    chunks = [r.reshape(m // CHUNK_ROWS, CHUNK_ROWS, *r.shape[1:]) for r in rows]
    acc, _ = jax.lax.scan(lambda a, c: (fn(a, *c), None), acc, chunks)
    return acc


def require_x64():
    """Refuse to trace an exact sum (or a release that needs float64) without float64: it would silently be float32."""
    if jnp.asarray(0.0, jnp.float64).dtype != jnp.float64:
        raise RuntimeError("privlin's exact sums need float64: trace them under privlin.sensitivity.x64()")


def _split_bits(bits, dims: int, outer_dims: int):
    """Grid bits of the two factors of an outer product (their products must still sum below 2⁵²), split to
    minimize the snapping error √dims·2^-ba + √outer_dims·2^-bb."""
    ba = jnp.round((bits + 0.5 * math.log2(dims / outer_dims)) / 2)
    ba = jnp.clip(ba, 1, bits - 1)
    return ba, bits - ba


def _snap(x, grid):
    """Integers x / grid, rounded to nearest, as float64 (exact: grid is a power of two)."""
    return jnp.round(jnp.asarray(x, jnp.float64) / grid)


def _snap_vector(V, mask, bound):
    """Rows of norm ≤ bound as integer multiples of bound·2⁻²² (float32 holding integers ≤ 2²² + 1, exactly).

    ``floor(x + ½)`` in float32 lands within one grid step of x (the margin counts one full step); it is an
    elementwise op XLA fuses into the sum that consumes it, so no snapped copy of the rows is materialized.
    ``mask`` holds 0 or 1 (a row in or out), so the product stays an integer.
    """
    require_x64()
    x = jnp.asarray(V, jnp.float32) * jnp.float32(2.0**VECTOR_BITS / bound)
    q = jnp.floor(x + jnp.float32(0.5))
    return q * jnp.asarray(mask, jnp.float32)[:, None]


def vector_sum(V, mask, bound) -> jax.Array:
    """Σ_i mask_i · V_i exactly, for rows of norm ≤ ``bound``: (m, d) -> (d,) float64."""
    return jnp.sum(_snap_vector(V, mask, bound).astype(jnp.float64), axis=0) * (bound * 2.0**-VECTOR_BITS)


def outer_sum(A, B, mask, bound, n) -> jax.Array:
    """Σ_i mask_i · A_i ⊗ B_i exactly (d, k), for rows A_i of norm ≤ 1 and B_i of norm ≤ ``bound``.

    A_i ⊗ B_i is the gradient of one example (direction of its row ⊗ its clipped, rescaled residual).
    Computed as ``(Bqᵀ Aq)ᵀ``: the snapped rows ``Aq`` stay in their (m, d) layout, so a loop of steps over the
    same rows (whose snapping XLA hoists out of the loop) does not transpose all of them every step; the sum is
    exact, so the order changes no bit.
    """
    ba, bb = _split_bits(grid_bits(n), A.shape[1], B.shape[1])
    ga, gb = jnp.exp2(-ba), bound * jnp.exp2(-bb)
    Bq = _snap(B, gb) * jnp.asarray(mask, jnp.float64)[:, None]
    return (Bq.T @ _snap(A, ga)).T * (ga * gb)


#: Most grid bits of a snapped row entry in :func:`offsets_sum` (rows of norm ≤ 1); fewer where N or d leave fewer
#: (:func:`_offset_bits`: 16 at N = 2²⁰, finer than a store's float16 rows at their typical size).
ROW_BITS = 20


def pow2_64(e) -> jax.Array:
    """2**e (float64) for integer-valued e in [−1022, 1023], built from its bits: exact."""
    return jax.lax.bitcast_convert_type((jnp.asarray(e, jnp.int64) + 1023) << 52, jnp.float64)


def _offset_bits(n, dims: int):
    """(row bits, weight bits) of :func:`offsets_sum`: a snapped offset entry (row and center entries in [−1, 1])
    is below 2^(row+1) and a snapped weight below 2^weight, so N of their products sum below 2⁵²
    (:func:`grid_bits`); and a row's squared distance to the center, d products of entries, stays below 2⁵³ (so it
    is exact).  Public (N and d only), so every center of a vmapped sweep shares the snapped rows."""
    bits = grid_bits(n) - 1.0
    exact_dot = (51 - 1 - math.ceil(math.log2(max(dims, 2)))) // 2
    row = jnp.clip(jnp.minimum(jnp.ceil(bits / 2) + 1, exact_dot), 1, ROW_BITS)
    return row, bits - row


#: Up to this many classes :func:`offsets_sum` sums per class by sorted tiles (:func:`_class_products`: settings
#: vmapped over the weights share the sorted rows), and above it where the classes average at least
#: :data:`TILED_ROWS_PER_CLASS` rows (a chunk of CHUNK_ROWS: up to 128 classes), so that the cut tile of each class
#: (8 rows at least) costs at most half the tiles' product; else by a scatter per setting.  The same integers
#: either way: the same bits.
TILED_CLASSES = 32
TILED_ROWS_PER_CLASS = 16


def _tiled(m: int, k: int) -> bool:
    """Whether :func:`offsets_sum` sums ``m`` rows into ``k`` classes by sorted tiles (else by a scatter)."""
    return k <= TILED_CLASSES or m >= TILED_ROWS_PER_CLASS * k


def _class_products(Uq, wq, label, k: int) -> jax.Array:
    """Σ_{i: label_i = c} wq_i·Uq_i for c < k (float64 integers, exact) in about one product's arithmetic, whatever
    k: the rows sorted by class (where each row goes, and the sorted rows, depend on the labels only, so settings
    vmapped over ``wq`` share them), the products summed tile by tile, each class the sum of the tiles from the one
    holding its start to the one before the one holding its end (a segment sum over tiles: a prefix sum over them
    costs several passes), plus the rows before its end in that last tile, less the rows before its start in the
    first (one masked tile product per end).  Any order of exact sums gives the same bits."""
    m, d = Uq.shape
    tile = int(min(64, max(8, 2 ** math.floor(math.log2(max(m // (2 * (k + 1)), 1))))))
    size = m + (-m % tile)
    # a counting sort (no sort op: XLA cannot serialize a sort's comparator twice): class c's rows, in their order,
    # go to positions [ends[c], ends[c+1])
    onehot = jax.nn.one_hot(label, k, dtype=jnp.int32)
    ends = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(jnp.sum(onehot, axis=0))])
    at = ends[label] + jnp.sum((jnp.cumsum(onehot, axis=0) - onehot) * onehot, axis=1)
    order = jnp.zeros(m, jnp.int32).at[at].set(jnp.arange(m, dtype=jnp.int32), unique_indices=True)
    Us = jnp.concatenate([Uq[order], jnp.zeros((size - m, d), Uq.dtype)]).reshape(-1, tile, d)
    ws = jnp.concatenate([wq[order], jnp.zeros(size - m, wq.dtype)]).reshape(-1, tile)
    tiles = Us.shape[0]
    whole = ends // tile  # tiles wholly before the end; then the first ends % tile rows of the next
    # tile j is summed into class c where whole[c] ≤ j < whole[c+1] (c = k: past the last class, dropped)
    owner = jnp.cumsum(jnp.zeros(tiles, jnp.int32).at[whole[1:]].add(1, mode="drop"))
    ranges = jax.ops.segment_sum(jnp.einsum("tr,trd->td", ws, Us), owner, num_segments=k + 1, indices_are_sorted=True)
    cut_tile = jnp.minimum(whole, tiles - 1)  # (past the last tile: no rows, any tile)
    cut = ws[cut_tile] * (jnp.arange(tile)[None, :] < (ends % tile)[:, None])
    before = jnp.einsum("br,brd->bd", cut, Us[cut_tile])  # each end's first rows in its tile
    return ranges[:k] + before[1:] - before[:-1]


def offsets_sum(U, mask, center, scale, cap, bound, n, Y=None) -> jax.Array:
    """Σ_i mask_i · w_i · (u_i − c) exactly, float64: (d,), or per class (k, d) with one-hot labels ``Y`` (m, k).

    ``w_i = min(cap, scale_i / ‖u_i − c‖)``, further limited so that each offset *as summed* has norm ≤ ``bound``:
    the weight of a clipped offset (``scale`` = ``bound`` = R, ``cap`` = 1) or of a row centered and re-normalized
    (``scale`` = ``bound`` = its length, ``cap`` ≥ scale / the least distance that matters).  ``U`` (m, d): rows of
    norm ≤ 1 (float32); ``c``: ``center`` (d,), public, or None for 0 (entries in [−1, 1], as every mean of such
    rows has them: :func:`privlin.releases.preprocess.private_mean` clips its release so; beyond, clipped here for the
    exactness); ``n``: the public N.

    The rows and the center are snapped to one grid 2^−a, each weight to ``cap``·2^−b (``cap`` rounded up to a
    power of two), so every product, and every sum of N of them, is an integer float64 holds exactly; a row's
    distance to the center is computed from the snapped integers (exact), and its weight leaves room for the weight's
    snapping (the margin below).  The one pass over the rows is two products (a row's distance, and the weighted
    sums), so under ``vmap`` over centers the rows are read once for all of them.  Trace under :func:`x64`.
    """
    require_x64()
    m, d = U.shape
    c = jnp.zeros(d, jnp.float64) if center is None else jnp.clip(jnp.asarray(center, jnp.float64), -1.0, 1.0)
    a, b = _offset_bits(n, d)
    ga = pow2_64(-a)
    cap2 = pow2_64(jnp.ceil(jnp.log2(jnp.asarray(cap, jnp.float64))))
    gw = cap2 * pow2_64(-b)
    cq = jnp.round(c / ga)
    # A snapped weight is within gw/2 of w, and an offset's length below ρ (rows ≤ 1, both snaps, float32 norms).
    rho = 1.0 + jnp.sqrt(jnp.sum(c * c)) + math.sqrt(d) * ga + (d + 16) * U32
    eta = gw * rho / (2.0 * bound) + 2.0**-48
    tiny = jnp.finfo(jnp.float64).tiny

    Uq = jnp.round(jnp.asarray(U, jnp.float32) * _pow2(a)).astype(jnp.float64)  # |u·2^a| < 2²⁴: exact in float32
    sq = jnp.sum(Uq * Uq, axis=1) - 2.0 * (Uq @ cq) + jnp.sum(cq * cq)  # integers below 2⁵³: exact
    dist = jnp.maximum(jnp.sqrt(jnp.maximum(sq, 0.0)) * ga * (1.0 + 2.0**-50), tiny)  # ≥ ‖û_i − ĉ‖
    w = jnp.minimum(jnp.minimum(cap, jnp.asarray(scale, jnp.float64) / dist),
                    jnp.where(eta < 1.0, bound * (1.0 - eta), 0.0) / dist)
    wq = jnp.round(w / gw) * jnp.asarray(mask, jnp.float64)
    if Y is None:
        return (wq @ Uq - jnp.sum(wq) * cq) * (ga * gw)
    label, k = jnp.argmax(Y, axis=1), Y.shape[1]
    wq = wq * jnp.sum(jnp.asarray(Y, jnp.float64), axis=1)  # a row of no class is a null row
    counts = jax.ops.segment_sum(wq, label, num_segments=k)
    products = (_class_products(Uq, wq, label, k) if _tiled(m, k)
                else jax.ops.segment_sum(wq[:, None] * Uq, label, num_segments=k))
    return (products - counts[:, None] * cq[None, :]) * (ga * gw)


def directions(X, fit_intercept: bool = False, *, norm: float | None = None) -> tuple[jax.Array, jax.Array]:
    """Rows (with a trailing 1 when an intercept is trained) as unit directions (m, d[+1]) and norms (m,).

    Any finite row has a finite direction (no overflow to inf, no underflow to 0); an all-zero row has
    direction 0.  Contributions are built as direction × clipped norm, so no row can make a released sum NaN
    or infinite.  ``norm``: every row is already normalized to this norm (or zero), so nothing is recomputed
    (the margin covers the float32 rounding of the normalized rows).  Float16 rows (a store's) cannot overflow
    or underflow a float32 sum of squares; other rows are first scaled by a power of two (exact).
    """
    safe = jnp.asarray(X).dtype == jnp.float16
    X = jnp.asarray(X, jnp.float32)
    if norm is not None:
        if fit_intercept:
            full = math.sqrt(norm * norm + 1.0)
            X = jnp.concatenate([X, jnp.ones((X.shape[0], 1), jnp.float32)], axis=1)
            return X / full, jnp.full((X.shape[0],), full, jnp.float32)
        return X / norm, jnp.full((X.shape[0],), norm, jnp.float32)
    if fit_intercept:
        X = jnp.concatenate([X, jnp.ones((X.shape[0], 1), jnp.float32)], axis=1)
    A, ns, e = _unit_rows(X, safe)
    if safe:
        return A, ns
    return A, _times_pow2(ns, e)  # the norm: inf past float32's range


def directions_and_log2_norms(X) -> tuple[jax.Array, jax.Array]:
    """:func:`directions` of rows (m, d) and log₂ of their norms (m,), from one scaling: finite for any nonzero
    finite row (a norm past float32's range included), −inf for an all-zero row."""
    safe = jnp.asarray(X).dtype == jnp.float16
    A, ns, e = _unit_rows(jnp.asarray(X, jnp.float32), safe)
    return A, jnp.log2(ns) + e.astype(jnp.float32)


def _unit_rows(X, safe: bool):
    """(directions, ns, e) of float32 rows: row i is ns_i·2^e_i times its direction (e = 0 for ``safe`` rows, which
    were float16: their sum of squares can neither overflow nor underflow in float32)."""
    if safe:
        ns = jnp.sqrt(jnp.sum(X * X, axis=1))
        e = jnp.zeros(X.shape[0], jnp.int32)
    else:
        X, e = scaled_rows(X)
        ns = jnp.sqrt(jnp.sum(X * X, axis=1))
    return X / jnp.maximum(ns, 1e-30)[:, None], ns, e


def _pow2(e) -> jax.Array:
    """2**e (float32) for integers e in [−126, 127], built from its bits: exact.  (``jnp.exp2`` is not: XLA's CPU
    kernel returns 0 for 2^−126, and any subnormal is flushed to 0.)"""
    return jax.lax.bitcast_convert_type((jnp.asarray(e, jnp.int32) + 127) << 23, jnp.float32)


def _times_pow2(x, e) -> jax.Array:
    """x·2^e for int32 e in [−252, 254], as two normal powers of two (:func:`_pow2`): exact wherever the result
    is a normal float32 (both factors move x the same way, so the intermediate is between x and the result)."""
    h = e // 2
    return x * _pow2(h) * _pow2(e - h)


def scaled_rows(X) -> tuple[jax.Array, jax.Array]:
    """``(X_i·2^−e_i, e_i)`` per row, exact: e_i = ⌈log₂ max|x_i|⌉ (int32; 0 for a zero row), so a scaled row's
    largest entry is about 1 and its sum of squares can neither overflow nor underflow.  The factor is applied as
    two normal powers of two.  Entries XLA treats as zero (subnormals: it flushes them) count as zero."""
    X = jnp.asarray(X, jnp.float32)
    m = jnp.max(jnp.abs(X), axis=1, keepdims=True)
    e = jnp.where(m > 0, jnp.ceil(jnp.log2(jnp.where(m > 0, m, 1.0))), 0.0).astype(jnp.int32)
    return _times_pow2(X, -e), e[:, 0]
