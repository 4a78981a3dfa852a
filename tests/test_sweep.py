"""privlin.sweep: settings are estimator parameters run by the one runner; the math matches autodiff + optax,
noise of different settings is independent, the privacy numbers match dp-accounting, keys stay secret."""
import csv
import io
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from dp_accounting import NeighboringRelation
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant as pld

from privlin import sensitivity, train
from privlin.ledger import PrivacyBudgetExceeded, PrivacyLedger
from privlin.sweep import PrivacyLeakWarning, sweep
from privlin import noise
from privlin.noise import make_key

CLASSES = np.arange(4)


@pytest.fixture(scope="module")
def data(blobs):
    return blobs(240, d=12, seed=0)


def _pld_eps(sigmas, steps, delta):
    acc = pld.PLDAccountant(NeighboringRelation.REPLACE_SPECIAL, value_discretization_interval=1e-3)
    acc.compose(ev.ComposedDpEvent([ev.SelfComposedDpEvent(ev.GaussianDpEvent(s), steps) for s in sigmas]))
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_adam1_without_noise_is_optax_adam_on_autodiff_clipped_gradients(data, fit_intercept):
    X, y = data
    with pytest.warns(PrivacyLeakWarning, match="NON-PRIVATE"):
        res = sweep((X, y), epsilon=math.inf, method="adam1", learning_rate=0.05, clip=0.7, normalize=False,
                    center=False, fit_intercept=fit_intercept, classes=CLASSES, eval_split=None)
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
    with pytest.warns(PrivacyLeakWarning, match="NON-PRIVATE"):
        res = sweep((X, y), epsilon=math.inf, method="sgd", steps=6, learning_rate=3.0, clip=0.3, center=False,
                    fit_intercept=False,
                    classes=CLASSES, eval_split=None)
    Xn = 0.3 * X / np.linalg.norm(X, axis=1, keepdims=True)  # normalize=True: rows at norm clip
    Y = jax.nn.one_hot(y, 4)

    def loss(W, x, t):
        return optax.softmax_cross_entropy(x @ W, t)

    W = jnp.zeros((X.shape[1], 4))
    opt = optax.sgd(3.0, momentum=0.9)
    state = opt.init(W)
    for _ in range(6):
        g = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(W, jnp.asarray(Xn), Y)
        norms = jnp.sqrt((g**2).sum((1, 2)))
        g = (g * jnp.minimum(1.0, 0.3 / norms)[:, None, None]).sum(0) / len(y)
        upd, state = opt.update(g, state, W)
        W = optax.apply_updates(W, upd)
    np.testing.assert_allclose(res.coef[0], W, rtol=1e-4, atol=1e-6)


def test_noise_of_different_settings_is_independent_and_has_the_stated_scale():
    """adam1's data-free stage on all-zero sums: the released gradients are pure noise of std σ·C, one draw per key."""
    K, D, S = 10, 2000, 5
    keys = noise.split(make_key(11).key, S)
    sig = jnp.asarray([0.5, 1.0, 2.0, 4.0, 8.0])
    with sensitivity.x64():  # class sums and noise are float64, as in the runner
        g0 = train.adam1_gradient(train.class_sums_init(D, K))
        g = np.asarray(jax.vmap(lambda k, s: train.privatize(g0, k, s, 2.0).W)(keys, sig))
    Z = (g / (2.0 * np.asarray(sig))[:, None, None]).reshape(S, -1)
    m = Z.shape[1]
    np.testing.assert_allclose(Z.std(1), 1.0, rtol=0.025)
    C = np.corrcoef(Z)
    off = C[~np.eye(S, dtype=bool)]
    assert np.abs(off).max() < 5 / math.sqrt(m)  # independent draws: |r| ~ 1/sqrt(m)
    with sensitivity.x64():
        g2 = np.asarray(jax.vmap(lambda k, s: train.privatize(g0, k, s, 2.0).W)(jnp.stack([keys[0], keys[0]]),
                                                                                   sig[:2]))
    assert np.corrcoef(g2.reshape(2, -1))[0, 1] > 0.999  # the same key twice: r = 1, the check has teeth


def test_privacy_numbers_match_dp_accounting_and_the_ledger_is_charged_first(data):
    X, y = data
    led = PrivacyLedger.in_memory()
    res = sweep((X, y), epsilon=[0.5, 1.0, 4.0], method="sgd", steps=10, center=False, delta=1e-5,
                classes=CLASSES, eval_split=None, random_state=1, ledger=led)
    for r in res.records:
        assert r["achieved_epsilon"] <= r["epsilon"] + 1e-9
        assert _pld_eps([r["noise_multiplier"]], 10, 1e-5) == pytest.approx(r["epsilon"], rel=5e-3)
    expected = _pld_eps([r["noise_multiplier"] for r in res.records], 10, 1e-5)
    assert res.total_epsilon == pytest.approx(expected, rel=5e-3)
    (entry,) = led.entries
    assert entry.epsilon == pytest.approx(expected, rel=5e-3) and entry.mechanism == "privlin.sweep/sgd"
    capped = PrivacyLedger.in_memory(cap=(2.0, 1e-5))
    with pytest.raises(PrivacyBudgetExceeded):
        sweep((X, y), epsilon=[1.0, 1.5, 2.0], classes=CLASSES, eval_split=None, ledger=capped)
    assert len(capped) == 0


def test_keys_stay_secret_unless_asked(data):
    X, y = data
    res = sweep((X, y), epsilon=[1.0, 2.0], classes=CLASSES, eval_split=None)
    assert all("key" not in r and r["seeded"] is False for r in res.records)
    shown = sweep((X, y), epsilon=[1.0, 2.0], classes=CLASSES, eval_split=None, return_keys=True)
    assert all("key" not in r and r["seeded"] is True for r in shown.records) and res.keys is None
    assert [np.shape(k) for k in shown.keys] == [(2, 2)] * 2 and len({k.tobytes() for k in shown.keys}) == 2
    assert "seeded" in str(shown.records[0]["report"])


def test_evaluating_on_the_training_rows_is_refused_before_the_charge(make_store, blobs, data):
    X, y = blobs(240, d=12, seed=0)
    st = make_store({"train": (X[:180], y[:180]), "test": (X[180:], y[180:])})
    with pytest.raises(ValueError, match="evaluation rows are the training rows"):
        sweep(st, split="test", epsilon=1.0, classes=CLASSES)  # eval_split defaults to "test"
    from privlin.data import as_source
    assert len(as_source(st, "test").ledger()) == 0
    Xa, ya = data
    led = PrivacyLedger.in_memory()
    with pytest.raises(ValueError, match="evaluation rows are the training rows"):
        sweep((Xa, ya), epsilon=1.0, classes=CLASSES, eval_data=(Xa, ya), ledger=led)
    assert len(led) == 0
    assert sweep((Xa, ya), epsilon=1.0, classes=CLASSES, eval_data=(Xa.copy(), ya)).records[0]["accuracy"] > 0


def test_best_on_a_private_split_is_flagged_not_private(make_store, blobs):
    X, y = blobs(240, d=12, seed=0)
    st = make_store({"train": (X[:180], y[:180]), "test": (X[180:], y[180:])})
    res = sweep(st, epsilon=[1.0, 8.0], classes=CLASSES, random_state=0)
    with pytest.warns(PrivacyLeakWarning, match="not a private result"):
        best = res.best()
    assert best["private"] is False and best["accuracy"] == max(r["accuracy"] for r in res.records)
    assert all(r["eval_split"] == "test" for r in res.records)
    public = sweep(st, epsilon=[1.0, 8.0], classes=CLASSES, random_state=0, eval_public=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert public.best()["private"] is True
    rows = list(csv.DictReader(io.StringIO(res.to_csv(extra={"backbone": "toy"}))))
    assert len(rows) == 2 and rows[0]["backbone"] == "toy" and float(rows[1]["epsilon"]) == 8.0
    assert "releasing all 2 settings" in res.table() and repr(res) == res.table()
    from privlin.data import as_source
    assert [e.mechanism for e in as_source(st, "train").ledger().entries] == ["privlin.sweep/sgd"] * 2


def test_classes_read_from_labels_warn_and_bad_settings_are_clear_errors(data):
    X, y = data
    with pytest.warns(PrivacyLeakWarning, match="classes inferred"):
        sweep((X, y), epsilon=[1.0], eval_split=None)
    with pytest.raises(ValueError, match="method"):
        sweep((X, y), method="lbfgs", classes=CLASSES)
    with pytest.raises(ValueError, match="epsilon"):
        sweep((X, y), epsilon=0.0, classes=CLASSES)
    with pytest.raises(ValueError, match="single step"):
        sweep((X, y), method="adam1", steps=3, classes=CLASSES)
    with pytest.raises(ValueError, match="centering needs normalize"):
        sweep((X, y), normalize=False, classes=CLASSES)
    with pytest.raises(ValueError, match="same classes"):
        sweep((X, y), settings=[{"classes": [0, 1]}, {"classes": [0, 1, 2]}])


def test_a_store_sweep_predicts_the_store_class_names_as_its_models_do(make_store, blobs):
    X, y = blobs(240, d=12, seed=0)
    names = ["ant", "bee", "cat", "dog"]
    st = make_store({"train": (X[:180], y[:180]), "test": (X[180:], y[180:])}, attrs={"classes": names})
    res = sweep(st, epsilon=[2.0, 8.0], random_state=0, eval_public=True)
    got = res.predict(1, X[180:])
    assert set(got) <= set(names) and got.dtype.kind == "U"
    np.testing.assert_array_equal(got, res.model(1).predict(X[180:]))
    np.testing.assert_array_equal(res.model(1).classes_, names)
    assert res.records[1]["accuracy"] == np.mean(got == np.asarray(names)[y[180:]])
