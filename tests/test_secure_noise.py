"""secure_mode noise: the discrete Gaussian against its closed form, releases exactly on the grid."""
import math

import jax
import numpy as np
import pytest
from scipy import stats

from privlin import secure_noise as sn
from privlin.noise import make_key


def _dg_pmf(sigma, support):
    """Closed-form discrete Gaussian pmf on ``support`` (normalised over a wide range)."""
    wide = np.arange(-int(40 * sigma) - 40, int(40 * sigma) + 41)
    z = np.exp(-(wide.astype(float) ** 2) / (2 * sigma**2)).sum()
    return np.exp(-(support.astype(float) ** 2) / (2 * sigma**2)) / z


def _chi2_pvalue(samples, pmf_fn, min_expected=20):
    """Chi-square goodness of fit; the tails are pooled into the outermost cells with enough mass."""
    n = samples.size
    half = int(max(abs(samples.min()), abs(samples.max()))) + 1
    support = np.arange(-half, half + 1)
    exp = pmf_fn(support) * n
    counts = np.bincount(samples + half, minlength=support.size).astype(float)
    keep = np.flatnonzero(exp >= min_expected)
    a, b = keep[0], keep[-1]
    obs = counts[a:b + 1].copy()
    ex = exp[a:b + 1].copy()
    obs[0] += counts[:a].sum()
    obs[-1] += counts[b + 1:].sum()
    ex[0] += exp[:a].sum()
    ex[-1] = n - ex[:-1].sum()
    return stats.chisquare(obs, ex).pvalue


@pytest.mark.parametrize("sigma", [0.5, 1.7, 6.0])
def test_discrete_gaussian_matches_closed_form(sigma):
    rng = np.random.default_rng(12345)
    k = sn.discrete_gaussian(200_000, sigma, rng)
    assert k.dtype == np.int64
    assert _chi2_pvalue(k, lambda s: _dg_pmf(sigma, s)) > 1e-3
    # and its variance is the closed-form one (smaller than sigma^2 when sigma is small)
    wide = np.arange(-200, 201)
    p = _dg_pmf(sigma, wide)
    var = (p * wide**2).sum()
    assert k.var() == pytest.approx(var, rel=0.02)


def test_discrete_gaussian_from_os_csprng():
    k = sn.discrete_gaussian((300, 100), 3.0)  # no generator: os.urandom
    assert k.shape == (300, 100)
    assert _chi2_pvalue(k.ravel(), lambda s: _dg_pmf(3.0, s)) > 1e-4
    assert not np.array_equal(k, sn.discrete_gaussian((300, 100), 3.0))


def test_discrete_gaussian_at_grid_scale_is_normal():
    sigma = 2.0**30
    k = sn.discrete_gaussian(50_000, sigma, np.random.default_rng(1))
    assert stats.kstest(k / sigma, "norm").pvalue > 1e-3


def test_discrete_laplace_matches_closed_form():
    t = 2.5
    k = sn.discrete_laplace(200_000, t, np.random.default_rng(7))
    pmf = lambda s: np.exp(-np.abs(s) / t) * (1 - math.exp(-1 / t)) / (1 + math.exp(-1 / t))
    assert _chi2_pvalue(k, pmf) > 1e-3


def test_uniform_and_key():
    u = sn.uniform(100_000)
    assert u.min() > 0 and u.max() <= 1
    assert stats.kstest(u, "uniform").pvalue > 1e-4
    a, b = make_key(), make_key()  # the library's one OS-entropy key source (128 bits), never seeded
    assert not a.seeded and not b.seeded
    assert not np.array_equal(jax.random.key_data(a.key), jax.random.key_data(b.key))


def test_release_is_exact_on_grid_and_unbiased():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 64)) * 10
    out, info = sn.secure_gaussian_release(x, std=2.0, sensitivity=1.0, rng=rng, return_info=True)
    g = info.grid
    assert g == 2.0 ** (1 - 30)
    assert np.all(np.rint(out / g) * g == out)
    assert 1 < info.inflation < 1 + 1e-5
    assert info.std == pytest.approx(2.0 * info.inflation)
    z = (out - x).ravel() / info.std
    assert stats.kstest(z, "norm").pvalue > 1e-3


def test_release_support_does_not_depend_on_input():
    # Two inputs closer than the grid give identical output distributions: the output
    # is a function of the rounded input plus integer noise, never of the low bits.
    x1 = np.full(1000, 0.3)
    x2 = x1 + 1e-12
    a = sn.secure_gaussian_release(x1, 1.0, 1.0, rng=np.random.default_rng(5))
    b = sn.secure_gaussian_release(x2, 1.0, 1.0, rng=np.random.default_rng(5))
    assert np.array_equal(a, b)


def test_release_refuses_bad_input():
    with pytest.raises(ValueError, match="non-finite"):
        sn.secure_gaussian_release(np.array([np.nan]), 1.0, 1.0)
    with pytest.raises(ValueError, match="too large"):
        sn.secure_gaussian_release(np.array([1e30]), 1.0, 1.0)
    with pytest.raises(ValueError):
        sn.discrete_gaussian(3, 0.0)
    with pytest.raises(ValueError):
        sn.grid_for(float("inf"))


def test_estimator_secure_mode_fits_and_reports_it():
    """secure_mode end to end: discrete Gaussian releases, same accuracy as plain noise, report says so."""
    import warnings

    from sklearn.datasets import load_digits

    from privlin import DPLinearClassifier

    X, y = load_digits(return_X_y=True)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    plain = [DPLinearClassifier(epsilon=8.0, method="adam1", classes=range(10), random_state=s).fit(X, y).score(X, y)
             for s in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no leak warning either
        sec = [DPLinearClassifier(epsilon=8.0, method="adam1", classes=range(10), secure_mode=True).fit(X, y)
               for _ in range(3)]
    r = sec[0].privacy_
    assert r.secure_mode and not r.seeded and "discrete Gaussian" in str(r) and r.to_dict()["secure_mode"]
    assert abs(np.mean([m.score(X, y) for m in sec]) - np.mean(plain)) < 0.03
    assert not np.allclose(sec[0].coef_transformed_, sec[1].coef_transformed_)  # fresh OS randomness each fit
    with pytest.raises(ValueError, match="random_state"):
        DPLinearClassifier(method="adam1", classes=range(10), secure_mode=True, random_state=0).fit(X, y)
    for method in ("sgd", "minibatch"):  # multi-step: every step's gradient sum released securely
        m = DPLinearClassifier(epsilon=8.0, method=method, steps=20, classes=range(10), secure_mode=True).fit(X, y)
        assert m.privacy_.secure_mode and m.score(X, y) > 0.8


def test_the_grid_comes_from_the_public_bound_and_the_release_cannot_fail_on_data():
    """A statistic as large as its public bound N·C is released exactly; a plan whose grid would be too coarse for
    its noise is refused before anything is read (a data-dependent failure after the charge would leak)."""
    from privlin.secure_noise import check_plan, grid_for, secure_gaussian_release

    bound = 2.0**30 * 0.5  # N = 2^30 rows at C = 0.5: the largest any sum can be
    value = np.full(8, bound)
    out, info = secure_gaussian_release(value, 1.0, 0.5, bound=bound, return_info=True)
    assert np.all(np.isfinite(out)) and info.grid == grid_for(1.0, bound) > grid_for(1.0)
    assert np.all(np.abs(out - value) < 20)  # noise std 1: the value survived the grid
    with pytest.raises(ValueError, match="too large"):
        secure_gaussian_release(value, 1.0, 0.5)  # without the bound: the old grid cannot hold it
    with pytest.raises(ValueError, match="coarser"):
        check_plan(1e-6, 2.0**45)
    assert check_plan(2.0, 1e6) == grid_for(2.0, 1e6)
