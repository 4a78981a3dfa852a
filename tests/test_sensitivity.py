"""privlin.sensitivity: released sums move by at most C when one row changes, in the arithmetic that computes
them; the float32 sums they replace do not (the crafted construction of the issue, as a negative control)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privlin import sensitivity, train
from privlin.releases import preprocess

pytestmark = pytest.mark.unit  # the pure pieces: run alone with `pytest -m unit`

N = 2**20  # identical unit rows


def crafted_pair(n=N):
    """n rows e1 plus one row x = (a, sqrt(1 - a^2)) whose first coordinate lands just past half an ulp of the
    running float32 sum (so it rounds up to a whole ulp: 2x its value), or a null row in its place."""
    a = 2.0**-4 + 2.0**-10  # ulp(2^20) = 2^-3 in float32
    X = np.zeros((n + 1, 2), np.float32)
    X[:n, 0] = 1.0
    X_in = X.copy()
    X_in[n] = [a, np.sqrt(1 - a * a)]
    mask_in = np.ones(n + 1, np.float32)
    mask_out = mask_in.copy()
    mask_out[n] = 0.0
    return X_in, mask_in, mask_out


def test_float32_sums_break_the_sensitivity():
    """The negative control: a sequential float32 sum moves by more than C = 1 for this one row of norm 1."""
    X_in, _, _ = crafted_pair()
    s_in = np.cumsum(X_in[:, 0], dtype=np.float32)[-1], np.cumsum(X_in[:, 1], dtype=np.float32)[-1]
    s_out = np.cumsum(X_in[:-1, 0], dtype=np.float32)[-1], np.cumsum(X_in[:-1, 1], dtype=np.float32)[-1]
    moved = np.hypot(float(s_in[0]) - float(s_out[0]), float(s_in[1]) - float(s_out[1]))
    assert np.linalg.norm(X_in[-1]) == pytest.approx(1.0) and moved > 1.005


@pytest.mark.heavy
def test_released_sums_move_by_at_most_c_on_the_crafted_rows():
    X, m_in, m_out = crafted_pair()
    n = X.shape[0]
    with sensitivity.x64():
        for C in (1.0, 0.37):
            moved = np.linalg.norm(np.asarray(preprocess.row_sum(X, m_in, C, n) - preprocess.row_sum(X, m_out, C, n)))
            assert moved <= C
            Y = jax.nn.one_hot(np.zeros(n, int), 3)
            acc0 = train.class_sums_init(2, 3)
            g_in = train.adam1_gradient(train.class_sums_update(acc0, X, Y, m_in, C, n))
            g_out = train.adam1_gradient(train.class_sums_update(acc0, X, Y, m_out, C, n))
            assert np.sqrt(np.sum(np.square(np.asarray(g_in.W - g_out.W)))) <= C
            params = train.LinearParams(jnp.asarray([[0.3, -0.2, 0.1], [0.05, 0.4, -0.3]], jnp.float32), jnp.zeros(3))
            d_in = train.clipped_grad_sum(params, X, Y, m_in, C, n, fit_intercept=True)
            d_out = train.clipped_grad_sum(params, X, Y, m_out, C, n, fit_intercept=True)
            diff = np.concatenate([np.ravel(d_in.W - d_out.W), np.ravel(d_in.b - d_out.b)])
            assert np.linalg.norm(diff) <= C


@pytest.mark.heavy
@pytest.mark.parametrize("seed", range(3))
def test_any_row_moves_any_sum_by_at_most_c(seed):
    """Random rows of wild scales (1e-30 .. 1e30, float32), a random row replaced by a null row: the exact bound."""
    rng = np.random.default_rng(seed)
    n, d, k = 3000, 7, 4
    X = (rng.normal(size=(n, d)) * 10.0 ** rng.uniform(-30, 30, size=(n, 1))).astype(np.float32)
    Y = jax.nn.one_hot(rng.integers(0, k, n), k)
    params = train.LinearParams(jnp.asarray(rng.normal(size=(d, k)), jnp.float32), jnp.zeros(k))
    mask = np.ones(n, np.float32)
    with sensitivity.x64():
        g = train.clipped_grad_sum(params, X, Y, mask, 1.0, n, fit_intercept=True)
        assert np.all(np.isfinite(np.asarray(g.W)))
        for j in rng.choice(n, 5, replace=False):
            null = mask.copy()
            null[j] = 0.0
            g0 = train.clipped_grad_sum(params, X, Y, null, 1.0, n, fit_intercept=True)
            moved = np.sqrt(np.sum(np.square(np.asarray(g.W - g0.W))) + np.sum(np.square(np.asarray(g.b - g0.b))))
            assert moved <= 1.0
            t = preprocess.row_sum(X, mask, 1.0, n) - preprocess.row_sum(X, null, 1.0, n)
            assert np.linalg.norm(np.asarray(t)) <= 1.0


def test_sums_are_exact_in_any_order_and_blocking():
    """Given the contributions, the float64 sum has the same bits whatever the order or the blocking."""
    rng = np.random.default_rng(0)
    n = 5000
    A = rng.normal(size=(n, 9)).astype(np.float32)
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    B = (rng.normal(size=(n, 5)) * rng.uniform(0, 0.4, size=(n, 1))).astype(np.float32)
    mask = (rng.random(n) < 0.9).astype(np.float32)
    perm = rng.permutation(n)
    with sensitivity.x64():
        whole = np.asarray(sensitivity.outer_sum(A, B, mask, 1.0, n))
        np.testing.assert_array_equal(np.asarray(sensitivity.outer_sum(A[perm], B[perm], mask[perm], 1.0, n)), whole)
        parts = sum(np.asarray(sensitivity.outer_sum(A[s], B[s], mask[s], 1.0, n))
                    for s in (slice(0, 123), slice(123, 4000), slice(4000, None)))
        np.testing.assert_array_equal(parts, whole)
        v = np.asarray(sensitivity.vector_sum(B, mask, 1.0))
        np.testing.assert_array_equal(np.asarray(sensitivity.vector_sum(B[perm], mask[perm], 1.0)), v)


def test_exact_sums_refuse_to_run_without_float64():
    with pytest.raises(RuntimeError, match="x64"):
        preprocess.row_sum(np.ones((4, 3), np.float32), np.ones(4), 1.0, 4)


def test_the_margin_is_small_where_it_matters():
    """The price of exactness: the clip shrinks by η, tiny for common sizes (public: from N, d, k only)."""
    with sensitivity.x64():
        assert float(sensitivity.margin(1e6, 768, outer_dims=100)) < 1e-3
        assert float(sensitivity.margin(1.4e7, 36865, outer_dims=1000)) < 1e-2
        assert float(sensitivity.margin(1e3, 64)) < 1e-5


def test_snapping_lands_on_integers_within_one_step():
    """A snapped vector entry is an integer number of grid steps, within one step of the value (the margin
    counts one step), for every magnitude up to 2^22 steps (XLA must not simplify the rounding away)."""
    x = np.concatenate([np.linspace(-2**22, 2**22, 100_001), [0.5, 1.5, 2.5, -0.5, 2**22 - 0.5, 3.49999]])
    with sensitivity.x64():
        q = np.asarray(jax.jit(lambda v: sensitivity._snap_vector(v[:, None], jnp.ones(v.shape[0]), 2.0**22))(
            jnp.asarray(x, jnp.float32)))[:, 0]
    assert np.all(q == np.round(q)) and np.all(np.abs(q - np.asarray(x, np.float32)) <= 1.0)


def test_directions_of_rows_at_the_edge_of_float32():
    """Rows whose largest entry is above 2^126 or near the smallest normal keep their direction (float64 numpy);
    the returned norm is inf only where the float32 norm is.  (The scale factor was once ``exp2(−e)``, which XLA's
    CPU kernel flushes to 0 for e ≥ 126: such rows became zero rows.)"""
    X = np.array([[3e38, -3e38, 1.0], [1e38, 2e37, 0.0], [1.2e-38, -3e-38, 0.0], [1.0, 2.0, 2.0]], np.float32)
    A, norms = sensitivity.directions(X)
    ref = X.astype(np.float64)
    ref_n = np.linalg.norm(ref, axis=1)
    np.testing.assert_allclose(np.asarray(A, np.float64), ref / ref_n[:, None], rtol=2e-6, atol=1e-7)
    assert np.isinf(norms[0]) and np.allclose(np.asarray(norms[1:], np.float64), ref_n[1:], rtol=1e-6)


# ----------------------------------------------------------------------------- offsets from a center

def offset_rows(rng, n, d, center):
    """Unit rows around ``center`` (float32), with the rows that stress a weight: one at the center, a zero row,
    one a grid step away, one opposite."""
    U = center + rng.normal(size=(n, d)) * 0.3
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    U[0] = center / max(np.linalg.norm(center), 1e-30)
    U[1] = 0.0
    U[2] = U[0] + 2.0**-20
    U[3] = -U[0]
    return U.astype(np.float32)


@pytest.mark.heavy
@pytest.mark.parametrize("norm_c", [0.0, 0.5, 0.97])
def test_offsets_sum_moves_by_at_most_the_bound(norm_c):
    """Clipped offsets (cap 1, scale = bound = r) and re-normalized ones (scale = bound, cap 64·bound), at the
    coarsest grids privlin uses (public N = 2³⁰): every zero-out neighbour moves the sum by at most the bound."""
    rng = np.random.default_rng(int(norm_c * 100))
    n, d, k = 400, 9, 3
    center = rng.normal(size=d)
    center *= norm_c / max(np.linalg.norm(center), 1e-30)
    U = offset_rows(rng, n, d, center)
    Y = np.asarray(jax.nn.one_hot(rng.integers(0, k, n), k))
    mask = np.ones(n, np.float32)
    with sensitivity.x64():
        for scale, cap, bound in ((0.05, 1.0, 0.05), (0.7, 0.7 * 64, 0.7)):
            for public_n in (n, 2**30):
                full = np.asarray(sensitivity.offsets_sum(U, mask, center, scale, cap, bound, public_n, Y))
                for j in list(range(4)) + list(rng.choice(np.arange(4, n), 6, replace=False)):
                    null = mask.copy()
                    null[j] = 0.0
                    part = np.asarray(sensitivity.offsets_sum(U, null, center, scale, cap, bound, public_n, Y))
                    assert np.linalg.norm(full - part) <= bound


@pytest.mark.heavy
@pytest.mark.parametrize("k", [1, 5, 40, 200])
def test_offsets_sum_is_exact_in_any_order_blocking_vmap_and_class_layout(k):
    """The same bits whatever the order, the blocking, a vmap over centers, and as each class summed alone (the
    one-class sum: no sorting, no tiles), with classes empty, tiny and large; by tiles (k ≤ TILED_CLASSES, and
    k = 40: 3000 rows, at least 16 a class on average) and by a scatter (k = 200: fewer)."""
    rng = np.random.default_rng(1)
    n, d = 3000, 11
    assert sensitivity._tiled(n, k) == (k < 200)
    centers = rng.normal(size=(3, d)) * 0.1
    U = offset_rows(rng, n, d, centers[0])
    labels = np.minimum(rng.geometric(0.3, n) - 1, k - 1) if k > 1 else np.zeros(n, int)
    Y = np.asarray(jax.nn.one_hot(labels, k + 1))[:, :k]  # class k (rows of no class): null rows
    mask = (rng.random(n) < 0.9).astype(np.float32)
    perm = rng.permutation(n)

    def total(c, U=U, Y=Y, mask=mask):
        return sensitivity.offsets_sum(U, mask, c, 0.8, 8.0, 0.8, n, Y)

    with sensitivity.x64():
        whole = np.asarray(total(centers[0]))
        np.testing.assert_array_equal(np.asarray(total(centers[0], U[perm], Y[perm], mask[perm])), whole)
        parts = sum(np.asarray(total(centers[0], U[s], Y[s], mask[s])) for s in (slice(0, 77), slice(77, 2000),
                                                                                slice(2000, None)))
        np.testing.assert_array_equal(parts, whole)
        many = np.asarray(jax.jit(jax.vmap(total))(jnp.asarray(centers)))
        for i in range(3):
            np.testing.assert_array_equal(many[i], np.asarray(total(centers[i])))
        for c in range(k):
            alone = sensitivity.offsets_sum(U, mask * Y[:, c], centers[0], 0.8, 8.0, 0.8, n)
            np.testing.assert_array_equal(np.asarray(alone), whole[c])


@pytest.mark.heavy
def test_offsets_sum_is_the_weighted_offsets_to_the_grid():
    """Against NumPy: Σ w_i (u_i − c) per class, w_i = min(cap, scale / ‖u_i − c‖), rows snapped to 2^-a."""
    rng = np.random.default_rng(2)
    n, d, k = 500, 16, 4
    c = rng.normal(size=d) * 0.15
    U = offset_rows(rng, n, d, c)[4:]  # no row near the center: the weights are not capped
    Y = np.asarray(jax.nn.one_hot(rng.integers(0, k, n - 4), k))
    V = U.astype(np.float64) - c
    w = np.minimum(4.0, 0.9 / np.linalg.norm(V, axis=1))
    want = (Y.T * w) @ V
    with sensitivity.x64():
        got = np.asarray(sensitivity.offsets_sum(U, np.ones(n - 4), c, 0.9, 4.0, 0.9, n, Y))
    assert np.allclose(got, want, atol=n * 2.0**-14)


@pytest.mark.parametrize("m,k", [(2048, 100), (2048, 10), (256, 33), (1000, 7)])
def test_class_products_are_the_per_class_sums_of_integers(m, k):
    """Sorted tiles against NumPy's per-class sums of the same integers, exactly, for several settings vmapped: rows
    a whole number of tiles (a chunk) or not, classes empty, of one row, cut by tiles or spanning many, the last
    ones empty (the ends past the last tile)."""
    rng = np.random.default_rng(m + k)
    label = np.minimum(rng.geometric(4.0 / k, m) - 1, k - 4)  # the last 3 classes empty, the first ones large
    label[:5] = k // 2  # a mid class with at least these rows
    Uq = rng.integers(-2**20, 2**20, (m, 9)).astype(np.float64)
    Wq = rng.integers(0, 2**20, (3, m)).astype(np.float64) * (rng.random((3, m)) < 0.9)
    want = np.zeros((3, k, 9))
    for s in range(3):
        np.add.at(want[s], label, Wq[s][:, None] * Uq)
    with sensitivity.x64():
        got = jax.jit(jax.vmap(lambda w: sensitivity._class_products(jnp.asarray(Uq), w, jnp.asarray(label), k)))(Wq)
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("d, k", [(300, 10), (6, 40)])
def test_outer_sum_is_the_exact_sum_in_a_vmapped_loop_of_steps(d, k):
    """Σ mask_i A_i ⊗ B_i equals its exact value (Python integers on the grids it snaps to) where it runs as the
    in-memory steps run it, vmapped over settings inside a ``lax.scan`` over the same rows (the snapped rows hoisted
    out of the loop), and as a single call: the same bits."""
    rng = np.random.default_rng(5)
    m, n = 257, 300.0
    A = rng.normal(size=(m, d)).astype(np.float32)
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    B = (rng.normal(size=(2, m, k)) * 0.1).astype(np.float32)
    mask = (rng.random(m) < 0.8).astype(np.float32)
    with sensitivity.x64():
        ga, gb = (float(jnp.exp2(-b)) for b in sensitivity._split_bits(sensitivity.grid_bits(n), d, k))
        qa = np.round(A.astype(np.float64) / ga).astype(np.int64).astype(object)
        want = []
        for Bs in B:
            qb = np.round(Bs.astype(np.float64) / gb).astype(np.int64) * mask.astype(np.int64)[:, None]
            want.append(qa.T.dot(qb.astype(object)).astype(np.float64) * (ga * gb))  # exact integers, one scaling

        def steps(Bs):  # two "steps" over the same rows, the first one's sum discarded
            def step(acc, b):
                return sensitivity.outer_sum(A, b, mask, 1.0, n), None
            return jax.lax.scan(step, jnp.zeros((d, k), jnp.float64), jnp.stack([Bs * 0.5, Bs]))[0]

        looped = np.asarray(jax.jit(jax.vmap(steps))(jnp.asarray(B)))
        single = [np.asarray(sensitivity.outer_sum(A, Bs, mask, 1.0, n)) for Bs in B]
    for i in range(2):
        np.testing.assert_array_equal(single[i], want[i])
        np.testing.assert_array_equal(looped[i], want[i])
