"""privlin.sweep: every setting equals the same setting trained alone, the math matches autodiff + optax,
noise of different settings is independent, and the privacy numbers match dp-accounting."""
import csv
import io
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant as pld

import stores
from privlin.train import ClassSums
from privlin.ledger import PrivacyBudgetExceeded, PrivacyLedger
from privlin.sweep import PrivacyLeakWarning, Setting, _adam1_noisy_grads, fit_setting, sweep

CLASSES = np.arange(4)


def _data(n=240, d=12, k=4, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, d)) * 2
    y = rng.integers(0, k, n)
    X = (centers[y] + rng.normal(size=(n, d))).astype(np.float32)
    return X, y.astype(np.int64)


@pytest.fixture(scope="module")
def data():
    return _data()


@pytest.fixture(scope="module")
def store(data):
    X, y = data
    url = "memory://sweep_store"
    for name, sl in (("train", slice(0, 180)), ("test", slice(180, 240))):
        Xs, ys = X[sl], y[sl]
        w = stores.create_split(url, name, n_rows=len(ys), dim=X.shape[1], dtype="float32", shard_rows=64)
        for i in w.pending():
            a, b = w.shard_bounds(i)
            w.write_shard(i, Xs[a:b], ys[a:b], np.array([f"{name}{j}" for j in range(a, b)]))
        w.finalize()
    return stores.open(url)


def _pld_eps(sigmas, steps, delta):
    acc = pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(ev.ComposedDpEvent([ev.SelfComposedDpEvent(ev.GaussianDpEvent(s), steps) for s in sigmas]))
    return acc.get_epsilon(delta)


def test_adam1_every_setting_equals_it_fitted_alone_on_a_store(store):
    res = sweep(store, eps=[0.5, 8.0], method="adam1", learning_rate=1e-2, clip=[1.0, 0.5],
                classes=CLASSES, random_state=7, ledger=PrivacyLedger.in_memory())
    assert len(res) == 4
    for i, rec in enumerate(res.records):
        W, b = fit_setting(store, rec["setting"], key=rec["key"], classes=CLASSES)
        np.testing.assert_array_equal(W, res.coef[i])
        np.testing.assert_array_equal(b, res.intercept[i])
        assert 0.0 <= rec["accuracy"] <= 1.0 and rec["eval_split"] == "test"
    assert len({tuple(r["key"]) for r in res.records}) == 4  # a distinct key per setting


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_adam1_without_noise_is_optax_adam_on_autodiff_clipped_gradients(data, fit_intercept):
    X, y = data
    res = sweep((X, y), settings=[Setting(method="adam1", epsilon=math.inf, learning_rate=0.05, clip=0.7,
                                          fit_intercept=fit_intercept)],
                classes=CLASSES, eval_split=None, random_state=0)
    Y = jax.nn.one_hot(y, 4)

    def loss(theta, x, t):  # sigmoid CE of [W; b], zero weights, bias -10
        z = x @ theta[:-1] + theta[-1]
        return optax.sigmoid_binary_cross_entropy(z, t).sum()

    theta0 = jnp.zeros((X.shape[1] + 1, 4)).at[-1].set(-10.0)
    g = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(theta0, jnp.asarray(X), Y)  # per-example (n, D+1, K)
    if not fit_intercept:
        g = g.at[:, -1].set(0.0)  # a frozen intercept is not part of the clipped gradient
    norms = jnp.sqrt((g**2).sum((1, 2)))
    g_mean = (g * jnp.minimum(1.0, 0.7 / norms)[:, None, None]).sum(0) / len(y)
    opt = optax.adam(0.05)
    upd, _ = opt.update(g_mean, opt.init(theta0), theta0)
    theta1 = optax.apply_updates(theta0, upd)
    np.testing.assert_allclose(res.coef[0], theta1[:-1], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(res.intercept[0], theta1[-1], rtol=1e-5)
    assert res.records[0]["private"] is False and res.total_epsilon == math.inf


def test_sgd_without_noise_is_optax_momentum_on_autodiff_clipped_gradients(data):
    X, y = data
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    res = sweep((X, y), settings=[Setting(method="sgd", epsilon=math.inf, steps=6, learning_rate=3.0, clip=0.3)],
                classes=CLASSES, eval_split=None, random_state=0)
    Y = jax.nn.one_hot(y, 4)

    def loss(W, x, t):
        return optax.softmax_cross_entropy(x @ W, t)

    W = jnp.zeros((X.shape[1], 4))
    opt = optax.sgd(3.0, momentum=0.9)
    state = opt.init(W)
    for _ in range(6):
        g = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(W, jnp.asarray(X), Y)
        norms = jnp.sqrt((g**2).sum((1, 2)))
        g = (g * jnp.minimum(1.0, 0.3 / norms)[:, None, None]).sum(0) / len(y)
        upd, state = opt.update(g, state, W)
        W = optax.apply_updates(W, upd)
    np.testing.assert_allclose(res.coef[0], W, rtol=1e-4, atol=1e-6)


def test_noise_of_different_settings_is_independent_and_has_the_stated_scale():
    K, D1, S = 10, 2000, 5
    keys = jax.random.split(jax.random.key(11), S)
    sig = jnp.asarray([0.5, 1.0, 2.0, 4.0, 8.0])
    zero = ClassSums(jnp.zeros((K, D1)), jnp.zeros(K), jnp.zeros(()))  # no signal: the sums are pure noise
    g = np.asarray(_adam1_noisy_grads(zero, keys, sig, 2.0))
    Z = (g / (2.0 * np.asarray(sig))[:, None, None]).reshape(S, -1)
    m = Z.shape[1]
    np.testing.assert_allclose(Z.std(1), 1.0, rtol=0.025)
    C = np.corrcoef(Z)
    off = C[~np.eye(S, dtype=bool)]
    assert np.abs(off).max() < 5 / math.sqrt(m)  # independent draws: |r| ~ 1/sqrt(m)
    # the same key twice would give r = 1: the check has teeth
    g2 = np.asarray(_adam1_noisy_grads(zero, jnp.stack([keys[0], keys[0]]), sig[:2], 2.0))
    assert np.corrcoef(g2.reshape(2, -1))[0, 1] > 0.999


def test_privacy_numbers_match_dp_accounting_and_the_ledger_is_charged_first(data):
    X, y = data
    led = PrivacyLedger.in_memory()
    res = sweep((X, y), eps=[0.5, 1.0, 4.0], method="sgd", steps=10, normalize=1.0, delta=1e-5,
                classes=CLASSES, eval_split=None, random_state=1, ledger=led)
    for r in res.records:
        assert r["achieved_epsilon"] <= r["epsilon"] + 1e-9
        assert _pld_eps([r["noise_multiplier"]], 10, 1e-5) == pytest.approx(r["epsilon"], rel=5e-3)
    assert res.total_epsilon == pytest.approx(_pld_eps([r["noise_multiplier"] for r in res.records], 10, 1e-5),
                                              rel=5e-3)
    assert len(led.entries) == 1 and led.entries[0].epsilon == pytest.approx(res.total_epsilon)
    capped = PrivacyLedger.in_memory(cap=(2.0, 1e-5))
    with pytest.raises(PrivacyBudgetExceeded):
        sweep((X, y), eps=[1.0, 1.5, 2.0], classes=CLASSES, eval_split=None, ledger=capped)


def test_best_on_a_private_split_is_flagged_not_private(store):
    res = sweep(store, eps=[1.0, 8.0], classes=CLASSES, random_state=0, ledger=PrivacyLedger.in_memory())
    with pytest.warns(PrivacyLeakWarning, match="not a private result"):
        best = res.best()
    assert best["private"] is False and best["accuracy"] == max(r["accuracy"] for r in res.records)
    public = sweep(store, eps=[1.0, 8.0], classes=CLASSES, random_state=0, eval_public=True,
                   ledger=PrivacyLedger.in_memory())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert public.best()["private"] is True
    rows = list(csv.DictReader(io.StringIO(res.to_csv(extra={"backbone": "toy"}))))
    assert len(rows) == 2 and rows[0]["backbone"] == "toy" and float(rows[1]["epsilon"]) == 8.0
    assert "releasing all 2 settings" in res.table()


def test_classes_read_from_labels_warn_and_bad_settings_are_clear_errors(data):
    X, y = data
    with pytest.warns(PrivacyLeakWarning, match="classes were read"):
        sweep((X, y), eps=[1.0], eval_split=None)
    with pytest.raises(ValueError, match="method"):
        Setting(method="lbfgs")
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        Setting(epsilon=0.0)
    with pytest.raises(ValueError, match="adam1 is one"):
        Setting(method="adam1", steps=3)
    with pytest.raises(ValueError, match="centering"):
        Setting(method="sgd", center_share=0.1)
    with pytest.raises(ValueError, match="not in classes"):
        sweep((X, y), eps=[1.0], classes=[0, 1], eval_split=None)
    with pytest.raises(ValueError, match="NaN"):
        sweep((np.full((4, 3), np.nan), np.zeros(4, int)), eps=[1.0], classes=[0, 1])


def test_every_setting_equals_the_estimator_fitted_alone_with_its_key(data):
    from privlin.estimator import DPLinearClassifier

    X, y = data
    settings = [Setting(method="adam1", epsilon=1.0, learning_rate=1e-3, clip=1.0, normalize=1.0),
                Setting(method="adam1", epsilon=8.0, learning_rate=1e-2, clip=1.0, normalize=1.0),
                Setting(method="sgd", epsilon=2.0, steps=5, learning_rate=1.0, clip=0.5, normalize=0.5),
                Setting(method="sgd", epsilon=4.0, steps=5, learning_rate=2.0, clip=0.5, normalize=0.5),
                Setting(method="sgd", epsilon=4.0, steps=4, learning_rate=2.0, clip=1.0, normalize=1.0,
                        center_share=0.05),
                Setting(method="adam1", epsilon=4.0, learning_rate=1e-3, clip=1.0, normalize=1.0, center_share=0.2)]
    res = sweep((X, y), settings=settings, classes=CLASSES, eval_split=None, random_state=5)
    for i, (s, rec) in enumerate(zip(settings, res.records)):
        est = DPLinearClassifier(epsilon=s.epsilon, delta=s.delta, method=s.method, steps=s.steps,
                                 learning_rate=s.learning_rate, clip=s.clip, center=s.centered,
                                 center_share=s.center_share or 0.5, classes=CLASSES,
                                 random_state=jnp.asarray(np.asarray(rec["key"], np.uint32))).fit(X, y)
        np.testing.assert_allclose(res.coef[i], est.coef_.T, rtol=2e-4, atol=1e-6 * np.abs(est.coef_).max())
        assert est.privacy_.epsilon == pytest.approx(rec["achieved_epsilon"], rel=1e-9)
        if s.centered:  # the released mean is part of the model: predictions use it
            np.testing.assert_allclose(res.means[i], est.mean_, rtol=1e-5, atol=1e-7)
        assert (res.predict(i, X) == est.predict(X)).mean() > 0.99
