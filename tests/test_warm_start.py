"""A warm start: DP steps from given weights (privlin.steps.fit_steps' ``start``), and the start a labelled public
source gives (a non-private fit on the public rows only, privlin.public)."""
from __future__ import annotations

import warnings

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


# ----------------------------------------------------------------------------- the public fit (train.public_fit)

def _padded(X, y, m=None):
    """Rows padded with null rows, as the runner loads them."""
    m = m or len(y) + 7
    Z = np.zeros((m, X.shape[1]), np.float32)
    Z[:len(y)] = X
    idx = np.zeros(m, np.int32)
    idx[:len(y)] = y
    mask = np.zeros(m, np.float32)
    mask[:len(y)] = 1
    return Z, idx, mask


def _public_fit(X, y, k, **kw):
    kw.setdefault("loss", "softmax")
    kw.setdefault("fit_intercept", True)
    kw.setdefault("bias_init", 0.0)
    return T.public_fit(*_padded(X, y), k, **kw)


def _centred(p):
    """Softmax weights up to the shift that leaves every probability unchanged."""
    W, b = np.asarray(p[0], np.float64), np.asarray(p[1], np.float64)
    return W - W.mean(1, keepdims=True), b - b.mean()


@pytest.mark.parametrize("d", [5, 300])  # 300 > m: the fit runs in the rows' span
def test_the_public_fit_is_scikit_learns_l2_logistic_regression(blobs, d):
    from sklearn.linear_model import LogisticRegression

    X, y = blobs(120, d=d, k=3, seed=20)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    ours = _public_fit(X, y, 3, grid=(1.0,), iterations=3000)
    ref = LogisticRegression(C=1.0, tol=1e-10, max_iter=10000).fit(X, y)
    W, b = _centred((ours.W, ours.b))
    Wr, br = _centred((ref.coef_.T, ref.intercept_))
    assert np.abs(Wr).max() > 0.1
    np.testing.assert_allclose(W, Wr, atol=2e-3)
    np.testing.assert_allclose(b, br, atol=2e-3)


def test_the_strength_is_the_one_cross_validation_on_the_public_rows_picks(blobs):
    """The C of the grid with the least held-out log-loss over folds i mod 5 (computed here with scikit-learn)."""
    from sklearn.linear_model import LogisticRegression

    X, y = blobs(150, d=6, k=3, seed=21)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    grid = (0.003, 30.0)
    fold = np.arange(len(y)) % 5
    loss = []
    for C in grid:
        total = 0.0
        for f in range(5):
            m = LogisticRegression(C=C, tol=1e-10, max_iter=10000).fit(X[fold != f], y[fold != f])
            P = m.predict_proba(X[fold == f])
            total -= np.log(P[np.arange(P.shape[0]), y[fold == f]]).sum()
        loss.append(total)
    best = grid[int(np.argmin(loss))]
    chosen = _public_fit(X, y, 3, grid=grid, iterations=2000)
    alone = _public_fit(X, y, 3, grid=(best,), iterations=2000)
    other = _public_fit(X, y, 3, grid=tuple(c for c in grid if c != best), iterations=2000)
    np.testing.assert_allclose(chosen.W, alone.W, atol=1e-3)  # one fit, vmapped or not: float rounding apart
    np.testing.assert_allclose(chosen.b, alone.b, atol=1e-3)
    assert np.abs(np.asarray(chosen.W) - np.asarray(other.W)).max() > 0.1


@pytest.mark.parametrize("loss,bias", [("softmax", 0.0), ("sigmoid", -3.0)])
def test_a_class_absent_from_the_public_rows_keeps_weight_zero(blobs, loss, bias):
    X, y = blobs(90, d=6, k=4, seed=22)
    keep = y != 2
    p = _public_fit(X[keep], y[keep], 4, loss=loss, bias_init=bias)
    assert np.all(np.asarray(p.W)[:, 2] == 0) and float(p.b[2]) == bias
    assert np.abs(np.asarray(p.W)[:, [0, 1, 3]]).max() > 0.1


# ----------------------------------------------------------------------------- the fit that starts there

def _fit(blobs, *, private_seed=12, change_row=False, **params):
    from privlin import DPLinearClassifier

    X, y = blobs(600, d=8, k=3, seed=private_seed)
    X_pub, y_pub = blobs(200, d=8, k=3, seed=13)
    if change_row:
        X, y = X.copy(), y.copy()
        X[0], y[0] = -X[0] * 5, (y[0] + 1) % 3
    params = {"classes": [0, 1, 2], "random_state": 0, "epsilon": 1.0, "public": (X_pub + 3, y_pub), **params}
    with pytest.warns(Warning, match="no content identity"):
        return DPLinearClassifier(**params).fit(X + 3, y)


@pytest.mark.parametrize("clip", [False, True])  # public_clip (tests/test_public_clip.py): σ and ε unchanged too
def test_the_start_is_free_epsilon_recomposed_independently(blobs, clip):
    import dp_accounting
    from closed_forms import gaussians, gdp_epsilon, mu_of

    cold = _fit(blobs)
    warm = _fit(blobs, public_start=True, public_clip=clip)
    assert warm.plan_.public_start and not cold.plan_.public_start and warm.plan_.public_clip == clip
    assert warm.plan_.sigma == cold.plan_.sigma and warm.plan_.steps == cold.plan_.steps
    event = warm.privacy_.dp_event
    # the public check and the steps, as without the start: the start is not charged
    checks = [sigma for release, sigma in warm.plan_.chain]
    assert [release.name for release, _ in warm.plan_.chain] == ["public_check"]
    assert gaussians(event) == checks + [warm.plan_.sigma] * warm.plan_.steps == gaussians(cold.privacy_.dp_event)
    assert gdp_epsilon(mu_of(gaussians(event)), 1e-5) == pytest.approx(1.0, abs=1e-6)
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(event)
    assert pld.get_epsilon(1e-5) == pytest.approx(warm.privacy_.epsilon, abs=2e-3)
    assert not np.allclose(warm.coef_transformed_, cold.coef_transformed_)


def test_the_start_is_a_function_of_the_public_rows_only(blobs):
    """Every statistic given by the public rows and a learning rate of 1e-20 (the steps move no weight by a float32
    ulp): the weights are the start; changing a private row leaves them bitwise equal, and they are the public fit
    of the public rows as the model sees them."""
    from privlin.chain import preprocess_rows

    a = _fit(blobs, public_start=True, learning_rate=1e-20)
    b = _fit(blobs, public_start=True, learning_rate=1e-20, change_row=True)
    # nothing released from the private rows before training but the public check's noisy count (it passed)
    assert [release.name for release, _ in a.plan_.chain] == ["public_check"]
    assert a.released_["public_check"].passed == b.released_["public_check"].passed == 1.0
    assert np.array_equal(a.coef_transformed_, b.coef_transformed_)
    assert np.array_equal(a.intercept_transformed_, b.intercept_transformed_)
    X_pub, y_pub = blobs(200, d=8, k=3, seed=13)
    Z = np.asarray(preprocess_rows(a.plan_, X_pub + 3, values=a.released_))
    p = _public_fit(Z, y_pub, 3)
    np.testing.assert_allclose(a.coef_transformed_, np.asarray(p.W).T, atol=1e-4)
    np.testing.assert_allclose(a.intercept_transformed_, np.asarray(p.b), atol=1e-4)


@pytest.mark.parametrize("clip", [False, True])  # public_clip (tests/test_public_clip.py)
def test_streamed_equals_in_memory(blobs, clip):
    a = _fit(blobs, public_start=True, epsilon=2.0, public_clip=clip)
    b = _fit(blobs, public_start=True, epsilon=2.0, public_clip=clip, memory_limit=1, block_rows=64)
    np.testing.assert_allclose(a.coef_transformed_, b.coef_transformed_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a.intercept_transformed_, b.intercept_transformed_, rtol=1e-4, atol=1e-5)


def test_report_and_ledger_name_the_start_and_its_public_rows(make_store, blobs):
    import privlin
    from privlin import data, public
    from privlin.ledger import PrivacyLedger

    st = make_store({"train": blobs(256, d=8, k=3, seed=14), "public": blobs(128, d=8, k=3, seed=15)},
                    own_items=False)
    model = privlin.fit(st, epsilon=1.0, classes=[0, 1, 2], public="public", public_start=True, progress=False)
    pub = public.resolve("public", data.as_source(st, "train"))
    said = f"training started from a fit on the public rows {pub.describe()}"
    assert said in model.privacy_.notes and pub.identity in said
    (entry,) = [e for e in PrivacyLedger.for_split(st.url, "train").entries if e.mechanism.startswith("DPLinear")]
    assert said in entry.params["public_start"]
    assert entry.params["public_clip"] is True and "public_clip" in model.privacy_.notes  # the default with a start
    assert entry.params["public_releases"] == ["radius", "center", "scale", "whiten"]


def test_a_start_it_cannot_make_is_refused_in_one_line(blobs):
    from privlin import DPLinearClassifier

    X, y = blobs(300, d=8, k=3, seed=12)
    X_pub, y_pub = blobs(100, d=8, k=3, seed=13)
    cases = [
        (dict(public=X_pub, classes=[0, 1, 2]), "reads the public rows' labels"),
        (dict(public=(X_pub, y_pub)), "needs a public class list"),
        (dict(public=(X_pub, y_pub), classes=[0, 1]), "have a label outside the class list"),
        (dict(classes=[0, 1, 2]), "needs labelled public rows"),
        (dict(public=(X_pub, y_pub), classes=[0, 1, 2], method="adam1"), "adam1 is one step from zero"),
    ]
    for params, match in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(ValueError, match=match):
                DPLinearClassifier(public_start=True, epsilon=1.0, **params).fit(X, y)
