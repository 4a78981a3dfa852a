"""A warm start: DP steps from given weights (privlin.steps.fit_steps' ``start``), and the start a labelled public
source gives (a non-private fit on the public rows only, privlin.public)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privlin import sensitivity, train as T
from privlin.in_memory import fit_full_batch, fit_minibatch
from privlin.noise import make_key

N, D, K = 64, 5, 3


@pytest.fixture(autouse=True)
def _x64():
    """privlin's released sums are exact float64 (privlin.sensitivity): the runner traces them under x64."""
    with sensitivity.x64():
        yield


def rows(seed=0, n=N, d=D, k=K):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = rng.integers(0, k, n)
    return jnp.asarray(X), jax.nn.one_hot(y, k), jnp.ones(n)


def a_start(seed=1, d=D, k=K):
    rng = np.random.default_rng(seed)
    return T.LinearParams(jnp.asarray(rng.normal(size=(d, k)), jnp.float32),
                          jnp.asarray(rng.normal(size=k), jnp.float32))


@pytest.mark.parametrize("fit", ["full", "minibatch"])
def test_zero_steps_return_the_start_exactly(fit):
    X, Y, mask = rows()
    start = a_start()
    kw = dict(steps=0, fit_intercept=True, start=start)
    if fit == "full":
        out = fit_full_batch(X, Y, mask, N, make_key(0).key, 3.0, 0.5, **kw)
    else:
        out = fit_minibatch(X, Y, mask, N, make_key(0).key, 3.0, 0.5, sample_rate=0.5, **kw)
    assert np.array_equal(out.W, start.W) and np.array_equal(out.b, start.b)


def test_no_start_is_zero_weights_and_the_constant_intercept():
    X, Y, mask = rows()
    out = fit_full_batch(X, Y, mask, N, make_key(0).key, 3.0, 0.5, steps=0, bias_init=-2.0)
    assert np.array_equal(out.W, np.zeros((D, K))) and np.array_equal(out.b, np.full(K, -2.0))


def _numpy_step(W, b, X, Y, lr, clip):
    """One plain clipped full-batch gradient step of softmax cross-entropy with an intercept, in numpy float64."""
    X, Y = np.asarray(X, np.float64), np.asarray(Y, np.float64)
    Z = X @ W + b
    P = np.exp(Z - Z.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    R = P - Y
    norms = np.linalg.norm(R, axis=1) * np.sqrt((X ** 2).sum(1) + 1)
    c = np.minimum(1.0, clip / norms)[:, None]
    return W - lr * (X.T @ (c * R)) / len(X), b - lr * (c * R).sum(0) / len(X)


def test_sigma_zero_steps_go_from_the_start():
    """σ = 0: plain clipped gradient descent from the start, computed independently in numpy."""
    X, Y, mask = rows(seed=3)
    start = a_start(seed=4)
    W, b = np.asarray(start.W, np.float64), np.asarray(start.b, np.float64)
    for _ in range(3):
        W, b = _numpy_step(W, b, X, Y, 0.5, 0.7)
    out = fit_full_batch(X, Y, mask, N, make_key(0).key, 0.0, 0.5, steps=3, momentum=0.0, clip=0.7,
                         fit_intercept=True, start=start)
    assert np.allclose(out.W, W, atol=1e-4) and np.allclose(out.b, b, atol=1e-4)


def test_the_start_does_not_change_the_noise():
    """One step: the noise added (the noisy run less the σ = 0 run from the same start) is the same from every
    start and from none, so σ and the guarantee do not depend on it."""
    X, Y, mask = rows(seed=5)
    moved = []
    for start in (None, a_start(seed=6), a_start(seed=7)):
        run = [fit_full_batch(X, Y, mask, N, make_key(9).key, s, 0.5, steps=1, momentum=0.0, fit_intercept=True,
                              start=start) for s in (0.0, 2.0)]
        moved.append(np.asarray(run[1].W, np.float64) - np.asarray(run[0].W, np.float64))
    assert np.abs(moved[0]).max() > 0.01
    assert np.allclose(moved[1], moved[0], atol=1e-5) and np.allclose(moved[2], moved[0], atol=1e-5)
