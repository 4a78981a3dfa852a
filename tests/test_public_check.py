"""The public check (privlin.releases.public_check): a paid count of private rows within the public radius decides
whether a public source's statistics are used.  Its σ and the composed ε against closed forms and dp-accounting; a
shifted source falls back to the private defaults' plan and a same-distribution source passes; the decision is a
function of the noisy count only."""
import math
import warnings

import dp_accounting
import numpy as np
import pytest

from privlin import DPLinearClassifier
from privlin.releases import public_check

CLASSES = [0, 1, 2]


def _data(blobs, seed=12, n=600):
    X, y = blobs(n, d=8, k=3, seed=seed)
    X_pub, _ = blobs(200, d=8, k=3, seed=seed + 1)
    return X + 3, y, X_pub + 3


def _shifted(X_pub, seed=0):
    """The benchmark's shifted source: the public rows plus their median norm along a random direction."""
    u = np.random.default_rng(seed).normal(size=X_pub.shape[1])
    return (X_pub + u / np.linalg.norm(u) * np.median(np.linalg.norm(X_pub, axis=1))).astype(np.float32)


def _fit(X, y, public=None, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # arrays carry no content identity: warned, and known here
        return DPLinearClassifier(classes=CLASSES, public=public, **params).fit(X, y)


def _ref(X_pub):
    return public_check.reference(lambda: iter([(X_pub, np.ones(len(X_pub)))]))


def test_the_reference_and_the_count_equal_their_leave_one_out_definitions(blobs):
    _, _, X_pub = _data(blobs)
    ref = _ref(X_pub)
    Z = np.asarray(X_pub, np.float64)
    loo = np.array([np.linalg.norm(Z[i] - np.delete(Z, i, axis=0).mean(0)) for i in range(len(Z))])
    np.testing.assert_allclose(ref.center, Z.mean(0), rtol=1e-12)
    assert ref.radius == pytest.approx(np.sort(loo)[math.ceil(public_check.QUANTILE * (len(Z) - 1))], rel=1e-9)
    assert ref.fraction == pytest.approx(np.mean(loo <= ref.radius * (1 + 1e-12)))
    X, _, _ = _data(blobs, seed=30)
    mask = np.ones(len(X))
    mask[:7] = 0  # null rows are never counted
    brute = sum(np.linalg.norm(np.asarray(X[i], np.float64) - Z.mean(0)) <= ref.radius for i in range(7, len(X)))
    assert public_check.count_within([(X[:300], mask[:300]), (X[300:], mask[300:])], ref) == brute


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_the_counts_sigma_and_the_composed_epsilon_agree_with_closed_forms_and_dp_accounting(blobs, epsilon):
    from closed_forms import gaussians, gdp_epsilon, gdp_mu, mu_of

    X, y, X_pub = _data(blobs)
    for source in (X_pub, _shifted(X_pub)):  # the plan with the public statistics, and the fallback
        model = _fit(X, y, source, epsilon=epsilon, random_state=0)
        (check, sigma), *_ = model.plan_.chain
        assert check.name == "public_check"
        # 2% of the GDP budget μ², sensitivity 1 (zero-out)
        assert sigma == pytest.approx(1.0 / (math.sqrt(public_check.CHECK_SHARE) * gdp_mu(epsilon, 1e-5)), rel=1e-6)
        event = model.privacy_.dp_event
        sigmas = gaussians(event)
        assert sigmas[0] == sigma and model.privacy_.noise_multipliers["public_check"] == sigma
        assert gdp_epsilon(mu_of(sigmas), 1e-5) == pytest.approx(epsilon, abs=1e-6)
        pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
        pld.compose(dp_accounting.GaussianDpEvent(sigma))  # the check, composed by hand with the rest of the plan
        for s in sigmas[1:]:
            pld.compose(dp_accounting.GaussianDpEvent(s))
        assert pld.get_epsilon(1e-5) == pytest.approx(epsilon, abs=5e-3)
        assert model.plan_.epsilon == pytest.approx(epsilon, abs=1e-6)


def test_the_ledger_charges_the_check_with_its_plan_before_reading(make_store, blobs):
    import privlin
    from closed_forms import gaussians, gdp_epsilon, mu_of
    from privlin.ledger import PrivacyLedger

    X, y, X_pub = _data(blobs)
    st = make_store({"train": (X[:256], y[:256]), "public": (_shifted(X_pub), np.zeros(200, np.int64)),
                     "test": (X[256:320], y[256:320])})
    model = privlin.fit(st, epsilon=1.0, classes=CLASSES, public="public", progress=False, random_state=0)
    (entry,) = [e for e in PrivacyLedger.for_split(st.url, "train").entries if e.mechanism.startswith("DPLinear")]
    sigma = model.plan_.sigma_of("public_check")
    assert entry.params["sigma_public_check"] == sigma and "public_check" in entry.params
    assert gaussians(entry.event)[0] == sigma
    assert gdp_epsilon(mu_of(gaussians(entry.event)), 1e-5) <= 1.0 + 1e-6
    assert entry.epsilon >= model.plan_.epsilon - 1e-9  # the charge covers the plan that ran


def test_a_shifted_source_fails_the_check_and_recovers_the_private_defaults(blobs):
    X, y, X_pub = _data(blobs)
    X_test, y_test, _ = _data(blobs, seed=40)
    shifted = _shifted(X_pub)
    for epsilon in (0.5, 2.0):
        checked, defaults = [], []
        for seed in range(3):
            model = _fit(X, y, shifted, epsilon=epsilon, random_state=seed)
            outcome = model.released_["public_check"]
            assert outcome.passed == 0.0 and outcome.count < outcome.threshold
            assert model.plan_.given == ()  # the private defaults' plan: every statistic released privately
            assert "failed, the private defaults' plan ran" in model.privacy_.notes
            assert "statistics failed the public check and were not used" in model.privacy_.notes
            checked.append(np.mean(model.predict(X_test) == y_test))  # public test rows
            defaults.append(np.mean(_fit(X, y, None, epsilon=epsilon, random_state=seed).predict(X_test) == y_test))
        assert np.mean(checked) >= np.mean(defaults) - 0.01, (epsilon, checked, defaults)
        assert np.mean(checked) > 0.8  # not chance (1/3): the public centre is not used


def test_a_same_distribution_source_passes_and_its_statistics_are_used(blobs):
    X, y, X_pub = _data(blobs)
    for epsilon in (0.5, 4.0):
        for seed in range(5):
            model = _fit(X, y, X_pub, epsilon=epsilon, random_state=seed)
            outcome = model.released_["public_check"]
            assert outcome.passed == 1.0 and outcome.count >= outcome.threshold
            assert [r.name for r, _ in model.plan_.given] == ["radius", "center", "scale", "whiten"]
            assert "passed, the public statistics were used" in model.privacy_.notes


def test_the_decision_reads_the_noisy_count_only(blobs, monkeypatch):
    import privlin.noise

    X, y, X_pub = _data(blobs)
    far = X + 50.0  # private rows far from the public centre: their exact count is 0
    ref = _ref(X_pub)
    sigma = public_check.check_sigma(1.0, 1e-5, "replace_special")
    bar = public_check.threshold(ref, len(X), sigma)
    for noisy, passed in ((bar + 0.5, 1.0), (bar - 0.5, 0.0)):
        monkeypatch.setattr(privlin.noise, "noisy_counts", lambda counts, std, key, **kw: np.array([noisy]))
        for rows in (X, far):  # the same noisy count, the same decision, whatever the rows
            model = _fit(rows, y, X_pub, epsilon=1.0, random_state=0)
            assert model.released_["public_check"].passed == passed
            assert model.released_["public_check"].threshold == pytest.approx(bar)
            assert bool(model.plan_.given) == bool(passed)
    assert public_check.passes(bar, ref, len(X), sigma) and not public_check.passes(bar - 1e-9, ref, len(X), sigma)


def test_settings_without_a_common_bound_take_no_check(blobs):
    X, y, X_pub = _data(blobs)
    for params in ({"method": "minibatch", "epsilon": 1.0}, {"epsilon": math.inf}):
        model = _fit(X, y, X_pub, random_state=0, **params)
        assert "public_check" not in model.released_ and model.plan_.release("public_check") is None
        assert model.plan_.given  # the public statistics, unchecked, as before
    assert public_check.applies({"method": "minibatch", "epsilon": 1.0})


def test_a_failed_check_with_a_public_start_still_fits_from_the_start(blobs):
    """The fallback keeps the DP steps' start (``public_start``): once the check is charged, its outcome (a function
    of the private rows) must not turn into an error, and the report names both what failed and the start."""
    X, y, X_pub = _data(blobs)
    _, y_pub, _ = _data(blobs, seed=13)
    y_pub = y_pub[:len(X_pub)]
    model = _fit(X, y, (_shifted(X_pub), y_pub), epsilon=1.0, method="sgd", public_start=True, random_state=0)
    assert model.released_["public_check"].passed == 0.0
    assert model.plan_.given == () and model.plan_.public_start
    assert "statistics failed the public check" in model.privacy_.notes
    assert "training started from a fit on the public rows" in model.privacy_.notes


def test_public_check_false_uses_the_public_statistics_unchecked_and_trains_on_the_whole_budget(blobs):
    import dp_accounting

    X, y, X_pub = _data(blobs)
    on = _fit(X, y, X_pub, epsilon=1.0, random_state=0)
    off = _fit(X, y, X_pub, epsilon=1.0, random_state=0, public_check=False)
    assert "public_check" not in off.released_ and off.plan_.release("public_check") is None
    assert [r.name for r, _ in off.plan_.given] == [r.name for r, _ in on.plan_.given]  # the same public statistics
    assert off.plan_.sigma < on.plan_.sigma  # the check's 2% of μ² goes to training
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(off.privacy_.dp_event)
    assert pld.get_epsilon(1e-5) == pytest.approx(1.0, abs=5e-3)
    # the shifted source is not caught without the check: its statistics are used as given
    shifted = _fit(X, y, _shifted(X_pub), epsilon=1.0, random_state=0, public_check=False)
    assert shifted.plan_.given and "public_check" not in shifted.released_
