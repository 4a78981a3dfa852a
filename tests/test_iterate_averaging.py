"""``average``: the DP steps return a mean of their iterates (a tail share, or an EMA) instead of the last one
(privlin.train.average_weights, privlin.steps.fit_steps).  Checked against numpy recomputations of the iterates
and of their mean, streamed against in memory, and σ / ε / the event against the fit without averaging (ε
recomposed with dp-accounting's PLD)."""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from privlin import noise, sensitivity, steps, train as T
from privlin.in_memory import InMemory
from privlin.noise import make_key
from test_public_clip import _numpy_gained_step


@pytest.fixture(autouse=True)
def _x64():
    with sensitivity.x64():
        yield


def _rows(n=48, d=5, k=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, jax.nn.one_hot(rng.integers(0, k, n), k)


def _steps(n, sigma):
    return steps.Steps(n, sigma, 0.5, n, 1.0, None, 1.0, "softmax", "sgd", 0.0, True, 1.0, None)


def _numpy_mean(iterates, average):
    """The mean numpy takes of the iterates: the last ⌈a·T⌉ uniformly, or the bias-corrected EMA recursion
    e ← β·e + (1 − β)·x from e = 0, β = 1 − 2/(T/2 + 1), divided by 1 − β^T."""
    T_ = len(iterates)
    if average == "ema":
        beta = 1.0 - 2.0 / (T_ / 2.0 + 1.0)
        e = np.zeros_like(iterates[0])
        for x in iterates:
            e = beta * e + (1.0 - beta) * x
        return e / (1.0 - beta ** T_)
    return np.mean(iterates[T_ - int(np.ceil(average * T_)):], axis=0)


@pytest.mark.parametrize("average", [0.5, 1.0, "ema"])
def test_the_mean_of_noiseless_iterates_is_numpys(average):
    """σ = 0: the iterates are plain clipped gradient descent, recomputed in numpy float64, and their mean too."""
    X, Y = _rows()
    n, d, k, steps_ = 48, 5, 3, 7
    out = steps.fit_steps(InMemory(jnp.asarray(X), Y, jnp.ones(n)), _steps(n, 0.0), make_key(0).key, steps_, d, k,
                          0.0, "sgd", average=average)
    W, b, its = np.zeros((d, k)), np.zeros(k), []
    for _ in range(steps_):
        W, b = _numpy_gained_step(W, b, X, np.asarray(Y), 0.5, 1.0, 1.0)
        its.append(np.concatenate([W.ravel(), b]))
    want = _numpy_mean(np.asarray(its), average)
    np.testing.assert_allclose(np.concatenate([np.ravel(out.W), out.b]), want, atol=2e-6)


@pytest.mark.parametrize("average", [0.3, "ema"])
def test_the_mean_of_noisy_iterates_is_the_mean_of_the_steps_from_the_same_keys(average):
    """σ > 0: each step from the same per-step keys by hand (privlin.steps.dp_step), their mean in numpy."""
    X, Y = _rows(seed=1)
    n, d, k, steps_ = 48, 5, 3, 10
    rows, t, key = InMemory(jnp.asarray(X), Y, jnp.ones(n)), _steps(n, 0.7), make_key(3).key
    out = steps.fit_steps(rows, t, key, steps_, d, k, 0.0, "sgd", average=average)
    last = steps.fit_steps(rows, t, key, steps_, d, k, 0.0, "sgd")
    opt = T.make_optimizer("sgd", 0.5, momentum=0.0)
    state, its = T.init_state(d, k, opt, 0.0), []
    for step_key in noise.split(key, steps_):
        state = steps.dp_step(rows, t, state, step_key)
        its.append(np.concatenate([np.ravel(state.params.W), state.params.b]).astype(np.float64))
    np.testing.assert_allclose(np.concatenate([np.ravel(last.W), last.b]), its[-1], atol=1e-6)
    np.testing.assert_allclose(np.concatenate([np.ravel(out.W), out.b]), _numpy_mean(np.asarray(its), average),
                               atol=2e-6)


def test_the_weights_are_the_rule():
    assert T.average_weights(100, 0.0) is None and T.average_weights(100, 0.01) is None  # one iterate: the last
    w = T.average_weights(100, 0.5)
    assert np.count_nonzero(w) == 50 and np.all(w[50:] == 1 / 50) and w.sum() == pytest.approx(1.0)
    assert T.average_weights(100, "ema").sum() == pytest.approx(1.0)
    assert T.average_weights(1, "ema") is None and T.average_weights(1, 1.0) is None  # one step: the last
    for bad in (1.5, -0.1, "mean"):
        with pytest.raises(ValueError, match="average="):
            T.average_weights(100, bad)


# ----------------------------------------------------------------------------- the estimator and privlin.fit

def _fit(blobs, **params):
    from privlin import DPLinearClassifier

    X, y = blobs(600, d=8, k=3, seed=12)
    X_pub, y_pub = blobs(200, d=8, k=3, seed=13)
    params = {"classes": [0, 1, 2], "random_state": 0, "epsilon": 1.0, **params}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # arrays: no content identity (warned)
        if params.pop("with_public", False):
            params.update(public=(X_pub + 3, y_pub), public_start=True)
        return DPLinearClassifier(**params).fit(X + 3, y)


@pytest.mark.parametrize("params", [dict(average=0.5), dict(average="ema", with_public=True),
                                    dict(average=0.5, method="minibatch", batch_size=128)])
def test_streamed_equals_in_memory(blobs, params):
    """Within tests/test_public.py's tolerance (tests/test_warm_start.py's with a start: its fit's float32)."""
    tol = dict(rtol=1e-4, atol=1e-5) if params.get("with_public") else dict(rtol=1e-5, atol=1e-6)
    a = _fit(blobs, **params)
    b = _fit(blobs, memory_limit=1, block_rows=64, **params)
    np.testing.assert_allclose(a.coef_transformed_, b.coef_transformed_, **tol)
    np.testing.assert_allclose(a.intercept_transformed_, b.intercept_transformed_, **tol)


@pytest.mark.parametrize("method", ["sgd", "minibatch"])
def test_sigma_epsilon_and_the_event_are_those_without_averaging(blobs, method):
    import dp_accounting

    last = _fit(blobs, method=method)
    mean = _fit(blobs, method=method, average=0.5)
    assert mean.plan_.sigma == last.plan_.sigma and mean.plan_.learning_rate == last.plan_.learning_rate
    assert mean.privacy_.noise_multipliers == last.privacy_.noise_multipliers
    assert mean.privacy_.dp_event == last.privacy_.dp_event and mean.privacy_.epsilon == last.privacy_.epsilon
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(mean.privacy_.dp_event)
    assert pld.get_epsilon(1e-5) == pytest.approx(1.0, abs=5e-3)
    assert not np.allclose(mean.coef_transformed_, last.coef_transformed_)
    assert "mean of the iterates of the last 50% of the steps" in mean.privacy_.notes
    assert "iterates" not in (last.privacy_.notes or "")


def test_the_ledger_and_report_say_averaging_was_used(make_store, blobs):
    import privlin
    from privlin.ledger import PrivacyLedger

    st = make_store({"train": blobs(256, d=8, k=3, seed=14), "test": blobs(64, d=8, k=3, seed=16)})
    last = privlin.fit(st, epsilon=1.0, classes=[0, 1, 2], progress=False)
    mean = privlin.fit(st, epsilon=1.0, classes=[0, 1, 2], average="ema", progress=False)
    assert "an exponential moving average of the iterates" in mean.privacy_.notes
    a, b = [e for e in PrivacyLedger.for_split(st.url, "train").entries if e.mechanism.startswith("DPLinear")]
    assert b.params["average"] == "ema" and "average" not in a.params
    assert a.params["sigma"] == b.params["sigma"] and a.epsilon == b.epsilon
    assert not np.allclose(last.coef_transformed_, mean.coef_transformed_)


def test_adam1_has_one_step_and_no_average(blobs):
    model = _fit(blobs, method="adam1", average=0.5)
    assert not model.plan_.averaged and "iterates" not in (model.privacy_.notes or "")


def test_a_share_that_averages_one_iterate_is_the_last_iterate_s_plan(blobs):
    """A share of the steps that covers one iterate averages nothing: the plan says 0 (one compiled program with
    ``average=0``), and the fit is the last iterate's, bit for bit."""
    one, last = _fit(blobs, average=0.01), _fit(blobs, average=0.0)
    assert one.plan_.average == 0.0 and not one.plan_.averaged
    np.testing.assert_array_equal(np.asarray(one.coef_transformed_), np.asarray(last.coef_transformed_))


def test_a_bad_average_is_refused_in_one_line(blobs):
    for bad in (1.5, "mean"):
        with pytest.raises(ValueError, match="average") as e:
            _fit(blobs, average=bad)
        assert "\n" not in str(e.value)


def test_secure_mode_averages_its_host_released_steps(blobs):
    """Secure mode's steps (released on the host, streamed) go through the same loop: averaged, σ unchanged."""
    last = _fit(blobs, secure_mode=True, memory_limit=1, random_state=None)
    mean = _fit(blobs, secure_mode=True, memory_limit=1, random_state=None, average=0.5)
    assert mean.plan_.averaged and mean.plan_.sigma == last.plan_.sigma
    assert mean.privacy_.epsilon == last.privacy_.epsilon
    assert "mean of the iterates of the last 50% of the steps" in mean.privacy_.notes
