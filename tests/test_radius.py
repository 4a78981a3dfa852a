"""The row-norm release and the radial coordinate (privlin.releases.norms): its sensitivity on adversarial rows, its
noise against numpy's, the plan's decision against the closed form, the runner's paths agreeing, and what it buys.

Oracles: numpy float64 norms and histograms, numpy's Gaussian draws, scikit-learn's logistic regression.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privlin import DPLinearClassifier, noise, runner, sensitivity
from privlin.releases import norms as radius
from privlin.plan import RADIUS_SHARE, make_plan
from privlin.sweep import sweep


def _adversarial_rows():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 6)).astype(np.float32)
    X[0] = 3e38  # the norm overflows float32
    X[1] = 0.0
    X[1, 2] = 1e-37  # the smallest normal float32 scale
    X[2] = 0.0  # an all-zero row: not counted, stays zero
    X[3] *= 1e-30
    X[4, :] = [1e20, -1e-20, 0, 0, 0, 0]
    X[5] = 1e-45  # subnormals only: XLA flushes them, so privlin (everywhere) sees a zero row
    return X


ZERO_ROWS = (2, 5)


def test_log_norms_and_counts_match_float64_numpy():
    X = _adversarial_rows()
    with np.errstate(divide="ignore"):
        ref = np.log2(np.linalg.norm(X.astype(np.float64), axis=1))
    got = np.asarray(radius.log2_norms(X), np.float64)
    live = np.isfinite(ref)
    live[list(ZERO_ROWS)] = False
    assert np.array_equal(np.isfinite(got), live) and np.max(np.abs(got[live] - ref[live])) < 1e-5
    bins = np.clip(np.floor(ref[live]) - radius.LOG2_LOW, 0, radius.BINS - 1).astype(int)
    with sensitivity.x64():
        counts = np.asarray(radius.norm_counts(X, np.ones(len(X))))
    assert np.array_equal(counts, np.bincount(bins, minlength=radius.BINS)) and counts.sum() == len(X) - 2


def test_counts_move_by_at_most_one_per_null_row():
    """Replacing any row by a null one (mask 0) moves the histogram by ≤ 1 in L2: exactly 1 for a nonzero row."""
    X = _adversarial_rows()
    full = np.asarray(radius.norm_counts(X, np.ones(len(X))), np.float64)
    for i in range(len(X)):
        mask = np.ones(len(X))
        mask[i] = 0
        move = np.linalg.norm(full - np.asarray(radius.norm_counts(X, mask), np.float64))
        assert move == (0.0 if i in ZERO_ROWS else 1.0)


def test_embedding_is_bounded_and_keeps_the_norm():
    """(direction, r)/√(1 + r²), r = clip(ln(‖x‖/R), ±1): unit rows, finite for every finite row; an all-zero row
    stays zero."""
    X = _adversarial_rows()
    E = np.asarray(radius.embed(X, jnp.float32(3.0)), np.float64)
    assert E.shape == (40, 7) and np.all(np.isfinite(E))
    assert np.all(E[list(ZERO_ROWS)] == 0)
    norms = np.linalg.norm(X.astype(np.float64), axis=1)
    live = norms > 0
    live[list(ZERO_ROWS)] = False
    r = np.clip(np.log(norms[live] / 8.0), -1, 1)
    np.testing.assert_allclose(np.linalg.norm(E[live], axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(E[live, :6], X[live] / norms[live, None] / np.sqrt(1 + r * r)[:, None], atol=1e-6)
    np.testing.assert_allclose(E[live, 6], r / np.sqrt(1 + r * r), atol=1e-6)


def test_release_finds_the_heaviest_pair_as_often_as_numpy_noise_does():
    """Counts with noise N(0, σ²) per bin, σ at the plan's threshold for N = 400 (half the rows in one pair):
    the released scale is the pair's boundary as often as with numpy's Gaussian draws (2000 draws each)."""
    n = 400
    sigma = n / 2 / (math.sqrt(2) * (math.sqrt(2 * math.log(radius.BINS)) + 2)) * 0.999
    assert radius.resolves(n, sigma) and not radius.resolves(n, sigma * 1.01)
    counts = np.zeros(radius.BINS)
    counts[150:152] = [110, 90]  # the heaviest pair (bins 150, 151): boundary 2^(LOG2_LOW + 151)
    counts[152] = 60
    counts[140:146] = 23  # the rest spread out
    truth = radius.LOG2_LOW + 151
    keys = noise.split(noise.make_key(0).key, 2000)
    with sensitivity.x64():
        got = np.asarray(jax.vmap(lambda k: radius.release_log_scale(jnp.asarray(counts), k, sigma))(keys))
    rng = np.random.default_rng(1)
    noisy = counts + rng.normal(0.0, sigma, size=(2000, radius.BINS))
    ref = radius.LOG2_LOW + 1 + np.argmax(noisy[:, :-1] + noisy[:, 1:], axis=1)
    p_got, p_ref = np.mean(got == truth), np.mean(ref == truth)
    assert abs(p_got - p_ref) < 4 * math.sqrt(p_ref * (1 - p_ref) / 2000 * 2) + 0.01, (p_got, p_ref)
    near = np.mean(np.abs(got - truth) <= 1)  # a neighbouring boundary still covers most rows within a factor 4
    assert near >= 0.95


def test_plan_buys_it_where_it_resolves_and_not_otherwise():
    """N = 200: bought at ε = 8 (σ_r = 1/(√0.03 μ)), not at ε = 0.5; radial=False turns it off (the plan
    before it); radial=True refuses where the scaling stage that weighs the coordinate is off."""
    on = make_plan({"epsilon": 8.0}, n=200, dim=8, n_classes=2)
    off = make_plan({"epsilon": 0.5}, n=200, dim=8, n_classes=2)
    assert on.radial and on.model_dim == 9 and on.budget_shares()["radius"] == pytest.approx(RADIUS_SHARE, rel=1e-6)
    assert not off.radial and off.model_dim == 8
    plain = make_plan({"epsilon": 8.0, "radial": False}, n=200, dim=8, n_classes=2)
    assert not plain.radial and plain.sigma < on.sigma
    with pytest.raises(ValueError, match="radial=True needs the scaling stage"):
        make_plan({"epsilon": 8.0, "radial": True, "scale": False}, n=200, dim=8, n_classes=2)
    with pytest.raises(ValueError, match="radial=True needs the scaling stage"):
        make_plan({"epsilon": 8.0, "radial": True, "method": "adam1"}, n=200, dim=8, n_classes=2)


def _offset_mixture(n, seed, d=8):
    """Two classes whose means differ along a common offset 3× their spread (the class signal lives in the norm)."""
    rng = np.random.default_rng(seed)
    offset = np.random.default_rng(99).normal(size=d) * 3.0
    y = rng.integers(0, 2, size=n)
    X = rng.normal(size=(n, d)) + offset + np.outer(2 * y - 1, offset / np.linalg.norm(offset)) * 1.5
    return X.astype(np.float32), y


def test_streamed_secure_and_swept_fits_release_what_the_in_memory_fit_does():
    X, y = _offset_mixture(1500, 0)
    kw = dict(epsilon=8.0, classes=[0, 1], random_state=5)
    a = DPLinearClassifier(**kw).fit(X, y)
    b = DPLinearClassifier(**kw, memory_limit=0, block_rows=512).fit(X, y)
    assert a.plan_.radial and a.radius_ == b.radius_ and a.coef_transformed_.shape == (2, 9)
    np.testing.assert_allclose(a.coef_transformed_, b.coef_transformed_, rtol=2e-3, atol=2e-4)
    assert a.privacy_.noise_multipliers["radius"] == a.plan_.sigma_radius and "2^" in a.privacy_.notes
    with pytest.raises(ValueError, match="radial coordinate"):
        runner.preprocess_rows(a.plan_, X, a.mean_, a.scaling_)
    s = DPLinearClassifier(**{**kw, "random_state": None}, secure_mode=True).fit(X, y)
    assert s.radius_ == a.radius_  # 1500 rows in two bins against noise of sd ~4: the same pair
    Xt, yt = _offset_mixture(500, 1)
    res = sweep((X, y), settings=[{"epsilon": 8.0, "classes": [0, 1]}, {"epsilon": 8.0, "classes": [0, 1],
                                                                         "radial": False}],
                eval_data=(Xt, yt), random_state=0)  # held out: a sweep refuses to score its training rows
    assert res.records[0]["radius"] is not None and res.records[1]["radius"] is None
    assert [c.shape for c in res.coef] == [(9, 2), (8, 2)]
    for i in range(2):
        assert res.model(i).score(Xt, yt) == pytest.approx(res.records[i]["accuracy"])


def test_the_coordinate_recovers_the_signal_along_the_offset():
    """N = 400, ε = 8, 5 seeds fixed in advance: with the radial coordinate the defaults are within 2 points of
    non-private logistic regression on standardized features, and 3 points above the same fit without it."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    X, y = _offset_mixture(400, 1)
    Xte, yte = _offset_mixture(4000, 2)
    sc = StandardScaler().fit(X)
    ref = LogisticRegression(max_iter=5000).fit(sc.transform(X), y).score(sc.transform(Xte), yte)
    settings = [{"epsilon": 8.0, "classes": [0, 1], "radial": r} for r in (None, False)]
    res = sweep((X, y), settings=settings * 5, eval_data=(Xte, yte), random_state=0)
    on = np.mean([r["accuracy"] for r in res.records[0::2]])
    off = np.mean([r["accuracy"] for r in res.records[1::2]])
    assert on >= ref - 0.02 and on >= off + 0.03, (on, off, ref)
