"""Privacy audits: the statistics against independent closed forms, and broken mechanisms caught.

The broken mechanisms live here, in the tests, never in the library.
"""
import json
import math
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from closed_forms import gdp_epsilon
from scipy import stats

from privlin import accounting
from privlin import audit as A
from privlin import noise, sensitivity
from privlin.noise import make_key

DELTA = 1e-5
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------- statistics


@pytest.mark.parametrize("k,n", [(0, 50), (3, 50), (25, 50), (50, 50), (7, 1000)])
def test_clopper_pearson_matches_scipy_exact_interval(k, n):
    lo, hi = A.clopper_pearson(k, n, 0.05)
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    assert lo == pytest.approx(ci.low, abs=1e-12)
    assert hi == pytest.approx(ci.high, abs=1e-12)


def test_epsilon_lower_bound_closed_form_at_zero_errors():
    # k = 0 errors: the one-sided CP upper bound is 1 - (alpha/2)^(1/n)
    n, conf = 250, 0.95
    p_hi = 1 - (0.025) ** (1 / n)
    expected = math.log((1 - DELTA - p_hi) / p_hi)
    assert A.epsilon_lower_bound(0, n, 0, n, DELTA, conf) == pytest.approx(expected, rel=1e-9)
    # coin-flip attacks prove nothing
    assert A.epsilon_lower_bound(125, 250, 125, 250, DELTA, conf) == 0.0


def test_one_run_p_value_without_delta_is_binomial_tail():
    for eps in (0.5, 2.0):
        q = 1 / (1 + math.exp(-eps))
        assert A.one_run_p_value(1000, 100, 80, eps, 0.0) == pytest.approx(stats.binom.sf(79, 100, q))


def test_one_run_epsilon_closed_form_all_correct():
    # r = v: p-value q^r; the bound solves q^r = 1 - confidence
    r = 100
    q = 0.05 ** (1 / r)
    assert A.one_run_epsilon(1000, r, r, 0.0, 0.95) == pytest.approx(math.log(q / (1 - q)), abs=1e-6)
    # delta > 0 only weakens the bound; coin-flip accuracy gives nothing
    assert A.one_run_epsilon(1000, r, r, 1e-5, 0.95) <= A.one_run_epsilon(1000, r, r, 0.0, 0.95)
    assert A.one_run_epsilon(1000, 100, 50, 1e-5) == 0.0


def test_threshold_audit_is_valid_on_the_gaussian_mechanism():
    """Simulated scores of a μ-GDP mechanism: the bound stays below its exact ε."""
    mu = 1.0
    eps_true = gdp_epsilon(mu, DELTA)  # the closed form, not privlin's accountant
    rng = np.random.default_rng(0)
    bounds = []
    for _ in range(20):
        s_in = {"x": rng.normal(mu, 1, 2000)}
        s_out = {"x": rng.normal(0, 1, 2000)}
        bounds.append(A.threshold_audit(s_in, s_out, delta=DELTA, rng=rng).epsilon_lb)
    # valid at 95 %: exceeding the truth is allowed in 5 % of audits, here 20 independent ones
    assert sum(b > eps_true for b in bounds) <= 2
    assert np.median(bounds) > 0.2 * eps_true, (bounds, eps_true)  # and it is not vacuous


def test_one_run_audit_is_valid_on_randomized_response():
    """ε-DP randomized response on m coin flips: the one-run bound stays below ε and near it."""
    eps, m = 2.0, 5000
    rng = np.random.default_rng(1)
    bounds = []
    for _ in range(10):
        inc = rng.random(m) < 0.5
        keep = rng.random(m) < 1 / (1 + math.exp(-eps))
        scores = np.where(inc == keep, 1.0, -1.0) + 1e-3 * rng.random(m)
        bounds.append(A.one_run_audit(scores, inc, delta=0.0).epsilon_lb)
    # valid at 95 %: at most a few of 10 independent audits may exceed the truth
    assert sum(b > eps for b in bounds) <= 2, bounds
    assert min(bounds) > 0.6 * eps


def test_audit_inputs_are_checked():
    with pytest.raises(ValueError):
        A.one_run_p_value(10, 20, 5, 1.0, 0.0)
    with pytest.raises(ValueError):
        A.threshold_audit({"a": np.zeros(3)}, {"a": np.zeros(3)}, delta=DELTA)
    with pytest.raises(ValueError):
        A.one_run_audit(np.zeros(4), np.zeros(3, bool), delta=0.0)


# --------------------------------------------------------------------------- mechanisms on digits


@pytest.fixture(scope="module")
def digits_all(digits):
    """All of digits (train and test of the shared split), rows at unit norm."""
    return _digits_all(digits)


def _digits_all(digits):
    Xtr, Xte, ytr, yte = digits
    return np.concatenate([Xtr, Xte]).astype(np.float32), np.concatenate([ytr, yte]).astype(np.int32)


def _clip(X, C=1.0):
    n = jnp.linalg.norm(X, axis=1, keepdims=True)
    return X * jnp.minimum(1.0, C / jnp.maximum(n, 1e-12))


def centered_sum_trainer(sigma, sigma_center, *, K=10, broken=None):
    """Private centering, then noisy per-class sums of the centred, clipped rows.

    ``broken``: ``"shared_noise"`` (one noise vector for all classes),
    ``"exact_mean"`` (the released mean has no noise), ``"weak_noise"`` (σ/10).
    """

    def train(X, y, key):
        k_mean, k_sum = noise.split(key)
        n = X.shape[0]  # public under add/remove
        Xc = _clip(X)
        if broken == "exact_mean":
            mean = Xc.sum(0) / n
        else:
            mean = (Xc.sum(0) + sigma_center * noise.normal(k_mean, (X.shape[1],))) / n
        Z = _clip(X - mean)
        sums = jax.nn.one_hot(y, K, dtype=X.dtype).T @ Z
        s = sigma / 10 if broken == "weak_noise" else sigma
        if broken == "shared_noise":
            z = noise.normal(k_sum, (1, X.shape[1])) * jnp.ones((K, 1))
        else:
            z = noise.normal(k_sum, sums.shape)
        return {"coef": sums + s * z, "mean": mean}

    return train


def _split(eps):
    """(σ of one step, σ of the centering) spending 10% of μ² on the centering: the plan's one σ split."""
    from privlin.plan import _calibrate

    sigma, sig = _calibrate(eps, DELTA, steps=1, q=1.0, shares={"center": 0.1}, accountant="gdp",
                            relation="replace_special")
    return sigma, sig["center"]


@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_correct_mechanism_passes(digits_all, eps):
    X, y = digits_all
    sigma, sigma_c = _split(eps)
    res = A.canary_audit(centered_sum_trainer(sigma, sigma_c), X, y, runs=1000, delta=DELTA, epsilon_claimed=eps)
    assert not res.violated, str(res)
    assert res.details["runs"] == 1000


@pytest.mark.parametrize("broken", ["weak_noise", "shared_noise", "exact_mean"])
def test_broken_mechanism_is_caught(digits_all, broken):
    X, y = digits_all
    eps = 1.0
    sigma, sigma_c = _split(eps)
    res = A.canary_audit(centered_sum_trainer(sigma, sigma_c, broken=broken), X, y, runs=1000, delta=DELTA,
                         epsilon_claimed=eps)
    assert res.violated, str(res)
    assert res.epsilon_lb > 1.5


def test_reference_gaussian_sum_tightness(digits_all):
    """The ideal mechanism at ε=8 is audited above zero but below its claim."""
    X, y = digits_all
    sigma = accounting.calibrate_noise(8.0, DELTA)
    res = A.canary_audit(A.gaussian_sum_trainer(sigma), X, y, runs=1000, delta=DELTA, epsilon_claimed=8.0)
    assert 0.3 < res.epsilon_lb <= 8.0


def test_one_run_audit_catches_weak_noise():
    """m Dirac canaries on unused coordinates, one run each: weak noise is caught, correct noise is not."""
    rng = np.random.default_rng(0)
    m, d_data = 400, 16
    X = np.zeros((300, d_data + m), np.float32)
    X[:, :d_data] = rng.normal(size=(300, d_data))
    y = rng.integers(0, 10, 300)
    canaries = np.zeros((m, d_data + m), np.float32)
    canaries[np.arange(m), d_data + np.arange(m)] = 1.0
    cy = rng.integers(0, 10, m)
    inc = rng.random(m) < 0.5
    Xall = np.concatenate([X, canaries[inc]])
    yall = np.concatenate([y, cy[inc]])
    for mult, expect_violation in [(1.0, False), (0.1, True)]:
        sigma = accounting.calibrate_noise(2.0, DELTA) * mult
        with sensitivity.x64():  # as run_trainer runs every trainer
            out = A.gaussian_sum_trainer(sigma)(jnp.asarray(Xall), jnp.asarray(yall), make_key(3).key)
        coef = np.asarray(out["coef"])
        scores = coef[cy, d_data + np.arange(m)]
        res = A.one_run_audit(scores, inc, delta=DELTA, epsilon_claimed=2.0)
        assert res.violated == expect_violation, str(res)


# --------------------------------------------------------------------------- the shipped estimator, audited

def under_noised_audits() -> dict:
    """Both under-noised audits, run with every noise draw of the shipped code (privlin.noise.gaussian) scaled by
    1/50: {name: (violated, ε lower bound, the result as text)}.  Run only in a fresh process
    (:func:`under_noised`): compiled code holding the scaled noise must never meet another test's fits."""
    from conftest import _digits

    real = noise.gaussian
    noise.gaussian = lambda key, shape, stddev, dtype=jnp.float32: real(key, shape, stddev * 0.02, dtype)
    X, y = _digits_all(_digits())
    found = {
        "estimator": A.audit_method("adam1", 1.0, runs=1000, delta=DELTA, seed=1),
        "one run": A.one_run_estimator_audit({"epsilon": 1.0, "method": "sgd", "steps": 10, "memory_limit": 0}, X,
                                             y, canaries=1000),
    }
    return {name: (bool(res.violated), float(res.epsilon_lb), str(res)) for name, res in found.items()}


@pytest.fixture(scope="module")
def under_noised(tmp_path_factory):
    """:func:`under_noised_audits` in one fresh process: its own JAX caches, privlin's stored programs off (an alias
    written there would send later fits of the same form to the scaled noise), its own ledger home."""
    code = textwrap.dedent("""
        import json, sys
        sys.path[:0] = [%r, %r]
        from test_audit import under_noised_audits
        print(json.dumps(under_noised_audits()))
    """ % (ROOT, os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PRIVLIN_COMPILATION_CACHE": "0", "PRIVLIN_LEDGER_HOME": str(tmp_path_factory.mktemp("led"))}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


#: Runs per audit: the trainers run the shipped defaults (sgd 100 steps, minibatch 200), so the default suite audits
#: adam1 and sgd on fewer runs (a weaker bound, as honest) and the minibatch audits are slow-marked (~4 min each).
RUNS = {"adam1": 1000, "sgd": 100, "minibatch_sgd": 200, "minibatch_adam": 200}
_slow = pytest.mark.slow


@pytest.mark.parametrize("method,eps", [
    ("adam1", 1.0), ("adam1", 4.0), ("sgd", 1.0), ("sgd", 4.0), pytest.param("minibatch_sgd", 1.0, marks=_slow),
    pytest.param("minibatch_sgd", 4.0, marks=_slow), pytest.param("minibatch_adam", 1.0, marks=_slow),
    pytest.param("minibatch_adam", 4.0, marks=_slow),
])
def test_estimator_trainers_pass_the_canary_audit(method, eps):
    """The trainer is the estimator's own in-memory fit (privlin.runner.train_rows with its plan), vmapped."""
    res = A.audit_method(method, eps, runs=RUNS[method], delta=DELTA, seed=1)
    assert res.epsilon_lb <= eps, str(res)
    assert res.details["runs"] == RUNS[method]


def test_an_under_noised_estimator_is_caught(under_noised):
    """The same audit, with every noise draw of the shipped code scaled by 1/50: the claim is refuted.

    (At 1/10 the centering noise, which reaches the canary's coordinate through every other centered row,
    still hides a sign-valued adam1 step at ε=1 in 1000 runs.)"""
    violated, epsilon_lb, text = under_noised["estimator"]
    assert violated and epsilon_lb > 2.0, text


def test_the_estimator_trainer_is_the_estimators_fit(digits_all):
    """Same key, same rows: the audit's trainer releases exactly what DPLinearClassifier.fit releases."""
    from privlin import DPLinearClassifier

    X, y = digits_all
    X, y = X[:300], y[:300]
    for method in ("adam1", "sgd"):
        trainer = A.AUDITS[method](epsilon=2.0, delta=DELTA, n_classes=10, n=len(y), dim=X.shape[1])
        with sensitivity.x64():  # how the runner traces it: the released sums are exact float64
            out = jax.jit(trainer)(jnp.asarray(X), jnp.asarray(y), make_key(4).key)
        est = DPLinearClassifier(epsilon=2.0, method=method, steps=trainer.plan.steps, classes=range(10),
                                 random_state=make_key(4).key).fit(X, y)
        np.testing.assert_allclose(np.asarray(out["coef"]), est.coef_transformed_, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(out["mean"]), est.mean_, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("path", [{}, {"memory_limit": 0}, {"secure_mode": True}])
def test_one_run_audit_through_the_estimator_fit_on_every_path(digits_all, path):
    X, y = digits_all
    res = A.one_run_estimator_audit({"epsilon": 2.0, "method": "sgd", "steps": 10, **path}, X, y, canaries=1000)
    assert not res.violated, str(res)
    assert res.details["m"] == 1000


def test_one_run_audit_through_the_estimator_catches_weak_noise(under_noised):
    violated, _, text = under_noised["one run"]
    assert violated, text


def test_cli_reports_claim_bound_and_attack(capsys):
    assert A.main(["--method", "adam1", "--epsilon", "2", "--runs", "200"]) == 0
    out = capsys.readouterr().out
    assert "claimed ε=2" in out and "audited lower bound" in out and "attack:" in out


def test_every_audit_states_its_ceiling():
    """The ceiling is the bound of a perfect attack with these run counts: no claim above it can be refuted."""
    rng = np.random.default_rng(0)
    perfect = A.threshold_audit({"s": np.ones(500)}, {"s": np.zeros(500)}, delta=DELTA, epsilon_claimed=50.0)
    assert perfect.epsilon_lb == pytest.approx(perfect.ceiling) and not perfect.violated
    assert "not testable" in str(perfect) and 3.0 < perfect.ceiling < 7.0  # 500 runs: far below ε = 50
    more = A.threshold_audit({"s": np.ones(5000)}, {"s": np.zeros(5000)}, delta=DELTA)
    assert more.ceiling > perfect.ceiling
    inc = rng.random(1000) < 0.5
    one = A.one_run_audit(np.where(inc, 1.0, 0.0) + 1e-3 * rng.random(1000), inc, delta=DELTA, epsilon_claimed=1.0)
    assert one.violated and one.ceiling * 0.8 < one.epsilon_lb <= one.ceiling
