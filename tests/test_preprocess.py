"""privlin.preprocess: normalization is exact, centering noise has the stated scale, sensitivity is the row norm."""
import numpy as np
import pytest

from privlin import preprocess as P
from privlin.noise import make_key


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
    d, sigma, norm, n = 200_000, 4.0, 2.0, 10
    total = np.full(d, 1e4 * n, np.float32)  # a mean far above the noise: James-Stein leaves it (factor > 0.9999)
    m = np.asarray(P.private_mean(total, n, make_key(0).key, sigma, norm))
    # the noise on the SUM has std sigma*norm; the mean divides it by the public n
    assert np.std(m * n) == pytest.approx(sigma * norm, rel=0.02)
    assert abs(np.mean(m * n - total)) < 5 * sigma * norm / np.sqrt(d) + 1e-4 * 1e4 * n


def test_private_mean_shrinks_noise_toward_zero():
    """James-Stein on the released mean: across draws, its squared error is below the unshrunk mean's (d·τ²,
    the closed form) where the noise is as large as the mean, and far below it where the rows are centered
    already; a mean far above the noise is kept."""
    d, n, sigma = 50, 100, 20.0
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
    Xc = np.asarray(P.apply(X, P.Preprocessing(1.0, mean)))
    assert np.allclose(np.linalg.norm(Xc, axis=1), 1.0, rtol=1e-5)
    expect = np.asarray(P.normalize_rows(X)) - mean
    expect /= np.linalg.norm(expect, axis=1, keepdims=True)
    assert np.allclose(Xc, expect, atol=1e-5)
    assert np.allclose(P.apply(X, P.Preprocessing(2.0)), P.normalize_rows(X, 2.0))
