"""privlin.releases.preprocess: normalization is exact, centering noise has the stated scale, sensitivity is the row
norm."""
import numpy as np
import pytest

from privlin.releases import preprocess as P
from privlin.noise import make_key


pytestmark = pytest.mark.unit  # the pure pieces: run alone with `pytest -m unit`

@pytest.fixture(autouse=True)
def _x64():
    """privlin's released sums are exact float64 (privlin.sensitivity): the runner traces them under x64."""
    from privlin import sensitivity

    with sensitivity.x64():
        yield



def rows(n=50, d=7, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32) * 5


def test_normalize_rows_to_norm_c_and_zero_rows_stay_zero():
    X = rows()
    X[3] = 0
    Xn = np.asarray(P.normalize_rows(X, 2.5))
    norms = np.linalg.norm(Xn, axis=1)
    assert np.allclose(np.delete(norms, 3), 2.5, rtol=1e-5)
    assert norms[3] == 0
    # direction unchanged
    assert np.allclose(Xn[0] / 2.5, X[0] / np.linalg.norm(X[0]), atol=1e-6)


def test_row_sum_sensitivity_is_the_norm():
    X = rows(n=20, d=5, seed=1)
    ones = np.ones(len(X), np.float32)
    full = np.asarray(P.row_sum(X, ones, 3.0, len(X)))
    assert np.allclose(full, (3.0 * X / np.linalg.norm(X, axis=1, keepdims=True)).sum(0), rtol=1e-5)
    for i in range(len(X)):  # row i replaced by a null row (zero-out): N stays public
        null = ones.copy()
        null[i] = 0
        assert np.linalg.norm(full - np.asarray(P.row_sum(X, null, 3.0, len(X)))) <= 3.0


def test_private_mean_noise_std_is_sigma_times_norm():
    d, sigma, norm, n = 200_000, 4.0, 2.0, 1000
    # a mean far above the noise (James-Stein leaves it: factor > 0.9999) and far inside [-norm, norm] (no clip)
    total = np.full(d, 1.0 * n, np.float32)
    m = np.asarray(P.private_mean(total, n, make_key(0).key, sigma, norm), np.float64)
    # the noise on the SUM has std sigma*norm; the mean divides it by the public n
    assert np.std(m * n) == pytest.approx(sigma * norm, rel=0.02)
    assert abs(np.mean(m * n - total)) < 5 * sigma * norm / np.sqrt(d) + 1e-4 * n


def test_private_mean_entries_lie_where_a_mean_of_rows_can():
    """A released mean of rows at norm C is clipped to [-C, C] per entry (post-processing): the exact offset sums
    (privlin.sensitivity.offsets_sum) rely on it."""
    m = np.asarray(P.private_mean(np.full(50, 300.0), 10, make_key(1).key, 50.0, 2.0))
    assert np.abs(m).max() <= 2.0 and (np.abs(m) == 2.0).any()


def test_private_mean_shrinks_noise_toward_zero():
    """James-Stein on the released mean: across draws, its squared error is below the unshrunk mean's (d·τ²,
    the closed form) where the noise is as large as the mean, and far below it where the rows are centered
    already; a mean far above the noise is kept."""
    d, n, sigma = 50, 10_000, 20.0  # big (100 τ per entry) is still where a mean of unit rows can be
    tau = sigma / n
    rng = np.random.default_rng(0)
    for scale, most in ((0.0, 0.1), (1.0, 0.6)):
        m = rng.normal(size=d) * tau * scale  # ‖m‖² ≈ scale²·d·τ²
        err = [np.sum((np.asarray(P.private_mean((m * n).astype(np.float32), n, make_key(s).key, sigma))
                       - m) ** 2) for s in range(200)]
        assert np.mean(err) < most * d * tau**2
    big = np.full(d, 100 * tau, np.float32)
    kept = np.asarray(P.private_mean(big * n, n, make_key(1).key, sigma))
    assert np.linalg.norm(kept - big) < 1.3 * np.sqrt(d) * tau


def test_private_mean_fresh_noise_per_key():
    total = np.ones(1000, np.float32)
    a = np.asarray(P.private_mean(total, 1, make_key(1).key, 1.0))
    b = np.asarray(P.private_mean(total, 1, make_key(2).key, 1.0))
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.15


def test_apply_centers_then_renormalizes():
    X = rows(seed=2) + 10.0  # far from the origin: centering matters
    mean = np.asarray(P.normalize_rows(X)).mean(0)
    Xc = np.asarray(P.apply(X, P.RowMap(1.0, mean)))
    assert np.allclose(np.linalg.norm(Xc, axis=1), 1.0, rtol=1e-5)
    expect = np.asarray(P.normalize_rows(X)) - mean
    expect /= np.linalg.norm(expect, axis=1, keepdims=True)
    assert np.allclose(Xc, expect, atol=1e-5)
    assert np.allclose(P.apply(X, P.RowMap(2.0)), P.normalize_rows(X, 2.0))


# ---- two-stage centering (CoinPress-style refinement)

def test_center_stages_rule_on_public_cases():
    """Two stages exactly where one stage's expected error e = √D·σ·C/N lies in [C/100, C/3] (closed form)."""
    for sigma, n, d, c, want in [(40.0, 1437, 192, 1.0, 1),     # e = 0.39 > C/3: a second stage would not shrink it
                                 (10.0, 1437, 192, 1.0, 2),     # e = 0.096
                                 (31.4, 200_000, 128, 1.0, 1),  # e = 0.0018 < C/100: already fine
                                 (30.0, 200, 9, 1.0, 1),        # e = 0.45
                                 (12.0, 200, 9, 2.0, 2),        # e = 0.36 = 0.18·C
                                 (float("inf"), 100, 4, 1.0, 1), (0.0, 100, 4, 1.0, 1)]:
        e = np.sqrt(d) * sigma * c / n
        assert want == (2 if c / 100 <= e <= c / 3 else 1)
        assert P.center_stages(sigma, n, d, c) == want


def test_refine_radius_is_one_and_a_half_first_stage_errors_at_most_the_norm():
    sigma, n, d = 10.0, 1437, 192
    assert float(P.refine_radius(sigma, n, d, 1.0)) == pytest.approx(1.5 * np.sqrt(d) * sigma * np.sqrt(2) / n)
    assert float(P.refine_radius(1e6, n, d, 2.0)) == 2.0


@pytest.mark.heavy
def test_offset_sum_clips_offsets_to_the_radius_and_its_sensitivity_is_the_radius():
    """Against NumPy's clipped offsets, and every zero-out neighbour moves the sum by at most R, with adversarial
    rows: one exactly at the first estimate, a zero row, one far away, one just past R."""
    rng = np.random.default_rng(3)
    d, n, r = 6, 40, 0.05
    first = np.ones(d, np.float32) / np.sqrt(d)
    U = first + rng.normal(size=(n, d)).astype(np.float32) * 0.03
    X = (U / np.linalg.norm(U, axis=1, keepdims=True) * rng.uniform(0.1, 1e6, size=(n, 1))).astype(np.float32)
    X[0] = first * 7.0            # exactly at the first estimate: offset ~0
    X[1] = 0.0                    # a zero row: offset -first, clipped to R
    X[2] = -first * 3e30          # opposite, huge
    ones = np.ones(n, np.float32)
    full = np.asarray(P.offset_sum(X, ones, first, r, n, 1.0))
    Un = X / np.maximum(np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True), 1e-300)
    V = Un - first
    lv = np.linalg.norm(V, axis=1, keepdims=True)
    want = (V * np.minimum(1.0, r / np.maximum(lv, 1e-300))).sum(0)
    assert np.allclose(full, want, atol=n * np.sqrt(d) * 2.0**-20)  # rows snapped to 2^-20 (sensitivity.ROW_BITS)
    assert np.linalg.norm(V[1]) > r and np.linalg.norm(V[2]) > r
    for i in range(n):
        null = ones.copy()
        null[i] = 0
        assert np.linalg.norm(full - np.asarray(P.offset_sum(X, null, first, r, n, 1.0))) <= r


def test_refined_mean_noise_std_is_sigma_times_radius():
    d, sigma, r, n = 200_000, 4.0, 0.05, 100_000
    first = np.zeros(d, np.float32)
    # offsets of norm r/2 (as clipped offsets can be), far above the noise: James-Stein keeps them (factor > 0.998)
    total = np.full(d, 0.5 * r / np.sqrt(d) * n)
    m = np.asarray(P.refined_mean(first, total, n, make_key(0).key, sigma, r), np.float64)
    assert np.std(m * n - total) == pytest.approx(sigma * r, rel=0.02)


@pytest.mark.heavy
def test_two_stages_find_a_tight_cloud_one_stage_cannot():
    """A cloud of spread 0.02 around a unit-norm mean (backbone-like rows).  At the same total budget (one release
    at σ, or two at σ√2 each: the same Gaussian composition) the two-stage error is far below one stage's, and
    each is within its closed form: one stage d·(σ/N)², two stages ≤ d·(σ√2·R/N)² with R = refine_radius."""
    from privlin.noise import split
    rng = np.random.default_rng(0)
    d, n, sigma = 64, 2000, 40.0
    m = rng.normal(size=d)
    m /= np.linalg.norm(m)
    X = (m + rng.normal(size=(n, d)) * 0.02 / np.sqrt(d)).astype(np.float32)
    true = np.asarray(P.normalize_rows(X), np.float64).mean(0)
    ones = np.ones(n, np.float32)
    r = float(P.refine_radius(sigma, n, d, 1.0))
    assert P.center_stages(sigma, n, d) == 2
    total = P.row_sum(X, ones, 1.0, n)
    one, two = [], []
    for s in range(40):
        k1, k2, k3 = split(make_key(s).key, 3)
        one.append(np.sum((np.asarray(P.private_mean(total, n, k1, sigma)) - true) ** 2))
        first = P.private_mean(total, n, k2, sigma * np.sqrt(2))
        offs = P.offset_sum(X, ones, first, r, n, 1.0)
        two.append(np.sum((np.asarray(P.refined_mean(first, offs, n, k3, sigma * np.sqrt(2), r)) - true) ** 2))
    assert np.mean(one) == pytest.approx(d * (sigma / n) ** 2, rel=0.35)
    assert np.mean(two) <= 1.2 * d * (sigma * np.sqrt(2) * r / n) ** 2
    assert np.mean(two) < np.mean(one) / 3  # closed forms: e₁ = 0.16, ratio (e₁/3e₁²)² = 4.3


# ---- re-centering rounds (zoom in on a tight cloud)

def test_recenter_rounds_rule_on_public_cases():
    """Rounds exactly where the centering's expected error e = √D·σ·C/N is at least C/10 (closed form)."""
    for sigma, n, d, c, want in [(40.0, 1437, 192, 1.0, 2),     # e = 0.39
                                 (10.0, 1437, 192, 1.0, 0),     # e = 0.096: the two-stage centering suffices
                                 (31.4, 200_000, 128, 1.0, 0),  # e = 0.0018
                                 (30.0, 200, 9, 1.0, 2),        # e = 0.45
                                 (12.0, 200, 9, 2.0, 2),        # e = 0.36 = 0.18·C
                                 (5.0, 200, 9, 2.0, 0),         # e = 0.15 = 0.075·C
                                 (float("inf"), 100, 4, 1.0, 0), (0.0, 100, 4, 1.0, 0)]:
        e = np.sqrt(d) * sigma * c / n
        assert want == (2 if np.isfinite(e) and 0 < e and e >= c / 10 else 0)
        assert P.recenter_rounds(sigma, n, d, c) == want


def _chain_numpy(X, means, norm):
    """NumPy's reading of apply's chain: normalize, then subtract each mean and normalize again."""
    def unit(A):
        A = np.asarray(A, np.float64)
        nrm = np.linalg.norm(A, axis=1, keepdims=True)
        return np.where(nrm > 0, A / np.where(nrm > 0, nrm, 1.0), 0.0) * norm
    U = unit(X)
    for m in means:
        U = unit(U - m)
    return U


def test_apply_takes_a_chain_of_means_in_order():
    X = rows(seed=4) + 10.0
    m1 = np.asarray(P.normalize_rows(X)).mean(0) * 0.9
    m2 = np.full(X.shape[1], 0.05, np.float32)
    m3 = np.linspace(-0.1, 0.1, X.shape[1]).astype(np.float32)
    got = np.asarray(P.apply(X, P.RowMap(2.0, np.stack([m1, m2, m3]))))
    assert np.allclose(got, _chain_numpy(X, [m1, m2, m3], 2.0), atol=1e-5)
    # one mean given as (d,) or as a chain of one: the same rows
    assert np.allclose(P.apply(X, P.RowMap(1.0, m1)), P.apply(X, P.RowMap(1.0, m1[None])))


def test_row_sum_after_rounds_is_the_recentered_rows_sum_and_its_sensitivity_is_the_norm():
    """Against NumPy's chain, and every zero-out neighbour moves the sum by at most the norm, with adversarial rows:
    a zero row, a huge one, and one along the first round's mean (its residual after that round is float rounding,
    which the re-normalization makes a unit row of arbitrary direction: left out of the comparison with NumPy, kept
    in the sensitivity check)."""
    rng = np.random.default_rng(5)
    n, d, norm = 30, 6, 2.0
    X = (rng.normal(size=(n, d)) * 0.1 + 1.0).astype(np.float32)
    m1 = (np.ones(d) / np.sqrt(d)).astype(np.float32)
    m2 = (rng.normal(size=d) * 0.05).astype(np.float32)
    X[0] = 0.0
    X[1] = m1 * 5.0
    X[2] = -X[3] * 3e30
    chain = np.stack([m1, m2])
    ones = np.ones(n, np.float32)
    full = np.asarray(P.row_sum(X, ones, norm, n, None, chain))
    but_1 = ones.copy()
    but_1[1] = 0
    want = np.delete(_chain_numpy(X, chain, 1.0), 1, axis=0).sum(0) * norm
    assert np.allclose(np.asarray(P.row_sum(X, but_1, norm, n, None, chain)), want, atol=1e-4 * n * norm)
    for i in range(n):
        null = ones.copy()
        null[i] = 0
        assert np.linalg.norm(full - np.asarray(P.row_sum(X, null, norm, n, None, chain))) <= norm


def test_round_means_noise_std_and_each_round_sees_the_ones_before():
    """Round j's release is private_mean of the sum over the rows re-centered by rounds < j, at σ·√R (so the R
    releases compose to one at σ): its std on the sum is σ·√R·norm; the first call gets None, the next the first
    round's mean."""
    d, sigma, norm, n, R = 100_000, 3.0, 2.0, 10_000, 2
    seen = []

    def sum_of(prev):  # a mean of 1 per entry: far above the noise (James-Stein keeps it), inside [-norm, norm]
        seen.append(None if prev is None else np.asarray(prev).shape)
        return np.full(d, 1.0 * n)

    from privlin.noise import split
    got = np.asarray(P.round_means(sum_of, n, split(make_key(0).key, R), sigma, R, norm))
    assert got.shape == (R, d) and seen == [None, (1, d)]
    for j in range(R):
        assert np.std(got[j].astype(np.float64) * n - n) == pytest.approx(sigma * np.sqrt(R) * norm, rel=0.02)
    assert abs(np.corrcoef(got[0], got[1])[0, 1]) < 0.02  # fresh noise per round


def test_rounds_find_a_tight_cloud_the_centering_alone_cannot():
    """A cloud of spread 0.02 around a unit-norm mean, where the centering's error (e = 0.16) is far above the
    spread: after the two-stage centering the rows the model sees still share one direction (‖mean‖² ≈ 0.93);
    two rounds first (one more release at σ, as the plan pays for it) bring that under 0.2."""
    from privlin.noise import split
    rng = np.random.default_rng(0)
    d, n, sigma = 64, 2000, 40.0
    m = rng.normal(size=d)
    m /= np.linalg.norm(m)
    X = (m + rng.normal(size=(n, d)) * 0.02 / np.sqrt(d)).astype(np.float32)
    ones = np.ones(n, np.float32)
    assert P.recenter_rounds(sigma, n, d) == 2 and P.center_stages(sigma, n, d) == 2

    def centering(rounds, keys):
        return P.staged_mean(P.row_sum(X, ones, 1.0, n, None, rounds),
                             lambda first, r: P.offset_sum(X, ones, first, r, n, 1.0, None, rounds),
                             n, keys, sigma, 2, 1.0, d)

    base, zoomed = [], []
    for s in range(10):
        k = split(make_key(s).key, 6)
        F = np.asarray(P.apply(X, P.RowMap(1.0, centering(None, (k[0], k[1])))))
        base.append(np.sum(F.mean(0) ** 2))
        rounds = P.round_means(lambda prev: P.row_sum(X, ones, 1.0, n, None, prev), n, k[2:4], sigma, 2, 1.0)
        chain = np.concatenate([np.asarray(rounds), np.asarray(centering(rounds, (k[4], k[5])))[None]])
        F = np.asarray(P.apply(X, P.RowMap(1.0, chain)))
        zoomed.append(np.sum(F.mean(0) ** 2))
    assert np.mean(base) > 0.8
    assert np.mean(zoomed) < 0.2
