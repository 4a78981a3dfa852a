"""``public_clip``: with a start from labelled public rows (``public_start``), every private gradient is multiplied
before the clip at C by C over the public rows' mean held-out gradient norm at the start (privlin.chain.clip_gain).
Checked against independent computations: numpy for the step, scikit-learn for the held-out norm, dp-accounting
and the GDP closed form for ε."""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privlin import sensitivity, steps, train as T
from privlin.in_memory import InMemory
from privlin.noise import make_key


@pytest.fixture(autouse=True)
def _x64():
    with sensitivity.x64():
        yield


def _numpy_gained_step(W, b, X, Y, lr, clip, gain):
    """One clipped full-batch gradient step of softmax cross-entropy with an intercept, each gradient times
    ``gain`` before the clip at ``clip``, divided by N, in numpy float64."""
    X, Y = np.asarray(X, np.float64), np.asarray(Y, np.float64)
    Z = X @ W + b
    P = np.exp(Z - Z.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    R = (P - Y) * gain
    norms = np.linalg.norm(R, axis=1) * np.sqrt((X ** 2).sum(1) + 1)
    c = np.minimum(1.0, clip / norms)[:, None]
    return W - lr * (X.T @ (c * R)) / len(X), b - lr * (c * R).sum(0) / len(X)


@pytest.mark.parametrize("gain", [1.0, 7.0])
def test_a_gained_step_is_the_gradient_times_the_gain_then_clipped(gain):
    rng = np.random.default_rng(0)
    n, d, k = 48, 5, 3
    X = rng.normal(size=(n, d)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Y = jax.nn.one_hot(rng.integers(0, k, n), k)
    start = T.LinearParams(jnp.asarray(rng.normal(size=(d, k)) * 3, jnp.float32),
                           jnp.asarray(rng.normal(size=k), jnp.float32))
    t = steps.Steps(n, 0.0, 0.5, n, 1.0, None, 1.0, "softmax", "sgd", 0.0, True, 1.0, None, jnp.float32(gain))
    out = steps.fit_steps(InMemory(jnp.asarray(X), Y, jnp.ones(n)), t, make_key(0).key, 2, d, k, 0.0, "sgd", start)
    W, b = np.asarray(start.W, np.float64), np.asarray(start.b, np.float64)
    for _ in range(2):
        W, b = _numpy_gained_step(W, b, X, np.asarray(Y), 0.5, 1.0, gain)
    np.testing.assert_allclose(out.W, W, atol=2e-5)
    np.testing.assert_allclose(out.b, b, atol=2e-5)


def test_the_gain_leaves_every_row_within_the_clip():
    """A row still moves the clipped sum by at most C, whatever the gain (so σ needs no change)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 6)).astype(np.float32) * 5
    Y = jax.nn.one_hot(rng.integers(0, 3, 40), 3)
    params = T.LinearParams(jnp.asarray(rng.normal(size=(6, 3)), jnp.float32), jnp.zeros(3, jnp.float32))
    c_eff = T.grad_clip(1.0, 40, 7, 3)
    for i in range(40):
        one = jnp.zeros(40).at[i].set(1.0)
        G = T.grad_block(jnp.zeros((7, 3), jnp.float64), jnp.asarray(X), Y, one, params, c_eff, 40, jnp.float32(1e4),
                         clip=1.0, loss="softmax", fit_intercept=True, row_norm=None, class_weight=None)
        assert float(jnp.linalg.norm(G)) <= 1.0


def test_the_held_out_norm_is_scikit_learns(blobs):
    """At the strength cross-validation picks, each public row's gradient norm ‖p − y‖·‖(z, 1)‖ under the fold
    model that left it out (rows i mod 5), averaged: computed with scikit-learn."""
    from sklearn.linear_model import LogisticRegression

    X, y = blobs(150, d=6, k=3, seed=31)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    m = 157
    Z = np.zeros((m, 6), np.float32)
    Z[:150] = X
    idx = np.zeros(m, np.int32)
    idx[:150] = y
    mask = np.zeros(m, np.float32)
    mask[:150] = 1
    fit = T.public_fit(Z, idx, mask, 3, loss="softmax", fit_intercept=True, bias_init=0.0, grid=(1.0,),
                       iterations=3000)
    fold = np.arange(150) % 5
    norms = np.zeros(150)
    for f in range(5):
        lr = LogisticRegression(C=1.0, tol=1e-10, max_iter=10000).fit(X[fold != f], y[fold != f])
        P = lr.predict_proba(X[fold == f])
        P[np.arange(len(P)), y[fold == f]] -= 1
        norms[fold == f] = np.linalg.norm(P, axis=1) * np.sqrt((X[fold == f] ** 2).sum(1) + 1)
    assert float(fit.held_out_norm) == pytest.approx(np.mean([norms[y == c].mean() for c in range(3)]), rel=2e-3)


def test_a_class_without_public_rows_counts_at_the_rows_norm(blobs):
    """Public rows of 2 of 3 classes: the third class counts at their mean ‖(z, 1)‖ (a row the start cannot
    predict), so the held-out norm is at least a third of it."""
    X, y = blobs(150, d=6, k=3, seed=32)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    keep = y != 1
    both = T.public_fit(X[keep], y[keep], np.ones(keep.sum(), np.float32), 3, loss="softmax", fit_intercept=True,
                        bias_init=0.0)
    full = T.public_fit(X, y, np.ones(len(y), np.float32), 3, loss="softmax", fit_intercept=True, bias_init=0.0)
    assert np.sqrt(2.0) / 3 <= float(both.held_out_norm) and float(full.held_out_norm) < np.sqrt(2.0) / 3


def test_the_cap_is_stable_for_gained_rows():
    """gained_cap bounds the Lipschitz constant of a gained, clipped row gradient: a finite-difference check on
    random rows and weights (the largest ratio seen stays below the bound it divides 2(1+β) by)."""
    rng = np.random.default_rng(2)
    gain, clip = 10.0, 1.0
    bound = 2.0 * 1.9 / float(T.gained_cap(gain, momentum=0.9, clip=clip, fit_intercept=True))
    worst = 0.0
    for _ in range(200):
        x = rng.normal(size=(1, 4))
        x = (x / np.linalg.norm(x)).astype(np.float32)
        y = jax.nn.one_hot(rng.integers(0, 3, 1), 3)
        W = rng.normal(size=(4, 3)) * rng.uniform(0, 20)
        dW = rng.normal(size=(4, 3)) * 1e-3

        def g(W):
            p = T.LinearParams(jnp.asarray(W, jnp.float64), jnp.zeros(3, jnp.float64))
            G = T.grad_block(jnp.zeros((5, 3), jnp.float64), jnp.asarray(x, jnp.float64), y, jnp.ones(1), p, clip, 1,
                             gain, clip=clip, loss="softmax", fit_intercept=True, row_norm=None, class_weight=None)
            return np.asarray(G)
        worst = max(worst, np.linalg.norm(g(W + dW) - g(W)) / np.linalg.norm(dW))
    assert 0.1 < worst <= bound * 1.01


# ----------------------------------------------------------------------------- the estimator

def _fit(blobs, *, memory_limit=2**30, block_rows=65536, **params):
    from privlin import DPLinearClassifier

    X, y = blobs(600, d=8, k=3, seed=12)
    X_pub, y_pub = blobs(200, d=8, k=3, seed=13)
    params = {"classes": [0, 1, 2], "random_state": 0, "epsilon": 1.0, "public": (X_pub + 3, y_pub), **params}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # arrays: no content identity (warned)
        return DPLinearClassifier(memory_limit=memory_limit, block_rows=block_rows, **params).fit(X + 3, y)


def test_the_clip_moves_the_fit_not_sigma(blobs):
    """σ, C and the event are those without the clip (ε recomposed with dp-accounting:
    tests/test_warm_start.py's test_the_start_is_free_epsilon_recomposed_independently, run with and without it)."""
    plain = _fit(blobs, public_start=True, public_clip=False)
    clipped = _fit(blobs, public_start=True)
    assert clipped.plan_.public_clip and not plain.plan_.public_clip
    assert clipped.plan_.sigma == plain.plan_.sigma and clipped.plan_.clip == plain.plan_.clip == 1.0
    assert not np.allclose(clipped.coef_transformed_, plain.coef_transformed_)


def test_without_a_start_the_fit_is_bitwise_unchanged(blobs):
    """public_clip acts only with public_start: without it (public statistics only, or no public rows) the fit is
    bitwise the one public_clip=False makes."""
    for public in ("default", None):
        kw = {} if public == "default" else {"public": None}
        a = _fit(blobs, **kw)
        b = _fit(blobs, public_clip=False, **kw)
        assert not a.plan_.public_clip
        assert np.array_equal(a.coef_transformed_, b.coef_transformed_)
        assert np.array_equal(a.intercept_transformed_, b.intercept_transformed_)


def test_a_public_clip_that_is_not_a_bool_is_refused(blobs):
    with pytest.raises(ValueError, match="public_clip"):
        _fit(blobs, public_start=True, public_clip="yes")
