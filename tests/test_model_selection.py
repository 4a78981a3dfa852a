"""PrivateGridSearchCV: every fold fit, the scores, the selection and the refit charged before any
row is read, on one ledger; the total checked against compositions made here from the parameters (the closed form
of Gaussian DP and dp-accounting's PLD), the refusal of a capped ledger before a row is read, and the score noise's
std measured over many seeded draws."""
import math
import warnings

import numpy as np
import pytest
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant as pld
from closed_forms import gdp_epsilon, mu_of
from scipy import stats
from sklearn.model_selection import GridSearchCV, KFold

import privlin
from privlin import DPLinearClassifier, data
from privlin.ledger import PrivacyBudgetExceeded, PrivacyLedger
from privlin.model_selection import PrivateGridSearchCV

K = 4
T = 3  # training steps of every candidate


@pytest.fixture(scope="module")
def rows(blobs):
    return blobs(120, d=8, k=K, seed=31)


def _base(**kw):
    """Explicit noise multipliers, no preprocessing releases: each fit is T Gaussians of its σ, nothing else."""
    return DPLinearClassifier(**{"epsilon": None, "noise_multiplier": 4.0, "center": False, "steps": T,
                                 "classes": range(K), "delta": 1e-5, **kw})


def _gdp_epsilon(sigmas, delta):
    """ε at δ of full-batch Gaussians of noise multipliers ``sigmas`` composed (:mod:`closed_forms`)."""
    return gdp_epsilon(mu_of(sigmas), delta)


def test_the_ledger_holds_every_fit_the_scores_and_the_refit(rows):
    X, y = rows
    led = PrivacyLedger.in_memory()
    folds, grid = 3, {"noise_multiplier": [2.0, 4.0], "learning_rate": [0.1, 1.0]}
    search = PrivateGridSearchCV(_base(ledger=led), grid, cv=folds, score_epsilon=1.0, score_delta=1e-5,
                                 random_state=0).fit(X, y)
    assert len(led) == 1  # one entry, charged before the rows were read
    sigma_s = search.privacy_.score_noise_multiplier
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)  # the scores' Gaussian, as dp-accounting sees it
    assert 0.99 <= acc.compose(ev.GaussianDpEvent(sigma_s)).get_epsilon(1e-5) <= 1.0 + 1e-3
    # built from the parameters: K folds x 4 candidates x T steps, the scores, the refit of the smallest σ (largest μ)
    sigmas = [s for _ in range(folds) for s in (2.0, 4.0, 2.0, 4.0) for _ in range(T)] + [sigma_s] + [2.0] * T
    spent, delta = led.spent(delta=1e-5)
    assert spent == pytest.approx(_gdp_epsilon(sigmas, 1e-5), rel=1e-6)
    acc = pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(ev.ComposedDpEvent([ev.SelfComposedDpEvent(ev.GaussianDpEvent(s), sigmas.count(s)) for s in set(sigmas)]))
    assert spent == pytest.approx(acc.get_epsilon(1e-5), rel=1e-2)
    assert search.privacy_.epsilon == pytest.approx(spent, rel=1e-9)
    assert search.privacy_.refit_event == ev.SelfComposedDpEvent(ev.GaussianDpEvent(2.0), T)
    # the selection is the argmax of what was published, and only noisy numbers are published
    res = search.cv_results_
    assert search.best_index_ == int(np.argmax(res["mean_test_score"])) and res["rank_test_score"][search.best_index_] == 1
    assert search.best_params_ == res["params"][search.best_index_]
    assert not np.allclose(res["noisy_correct"], np.round(res["noisy_correct"]))  # noise, not integer counts
    assert search.best_estimator_.ledger_ is led and search.best_estimator_.get_params()["ledger"] is led
    assert search.predict(X).shape == (len(y),)


class _Untouchable(data.ArraySource):
    """Rows that fail the test if anything reads them."""

    def blocks(self, rows, page_locked=False):
        raise AssertionError("a row was read")

    def fit_blocks(self, rows, page_locked=False):
        raise AssertionError("a row was read")

    def labels(self):
        raise AssertionError("a label was read")


def test_a_capped_ledger_refuses_the_search_before_any_row_is_read(rows):
    X, y = rows
    led = PrivacyLedger.in_memory(cap=(5.0, 1e-5))
    search = PrivateGridSearchCV(_base(ledger=led), {"learning_rate": [0.1, 1.0]}, cv=3, score_epsilon=1.0)
    with pytest.raises(PrivacyBudgetExceeded, match="Nothing was read"):
        search.fit(_Untouchable(X, y))
    assert len(led) == 0 and not hasattr(search, "cv_results_")
    # the same search under a cap it fits in runs, and reads the rows only then
    roomy = PrivacyLedger.in_memory(cap=(50.0, 1e-5))
    search = PrivateGridSearchCV(_base(ledger=roomy), {"learning_rate": [0.1, 1.0]}, cv=3, score_epsilon=1.0)
    with pytest.raises(AssertionError, match="was read"):
        search.fit(_Untouchable(X, y))
    assert len(roomy) == 1


def test_the_scores_noise_has_the_stated_std():
    """All labels outside the class list: every row is a null row, no prediction is correct, the exact summed
    count of every candidate is 0 whatever the folds and fits.  What is published is then the noise alone."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(24, 4)).astype(np.float32)
    y = np.full(24, 7)
    grid = {"learning_rate": [0.1 * (i + 1) for i in range(8)]}
    draws, std = [], None
    for seed in range(30):
        s = PrivateGridSearchCV(_base(steps=1, noise_multiplier=2.0), grid, cv=2, score_epsilon=0.5, refit=False,
                                random_state=seed).fit(X, y)
        draws.append(s.cv_results_["noisy_correct"])
        std = s.privacy_.score_noise_std
        assert std == pytest.approx(s.privacy_.score_noise_multiplier * math.sqrt(8), rel=1e-12)
    draws = np.concatenate(draws)  # 240 draws
    assert abs(draws.mean()) < 4 * std / math.sqrt(draws.size)
    assert np.std(draws) == pytest.approx(std, rel=0.15)  # the sample std's own sd is ~4.6% at 240 draws
    # the same seed, the same release
    a = PrivateGridSearchCV(_base(steps=1, noise_multiplier=2.0), grid, cv=2, score_epsilon=0.5, refit=False,
                            random_state=3).fit(X, y)
    np.testing.assert_array_equal(a.cv_results_["noisy_correct"], draws[3 * 8:4 * 8])


def test_seeded_searches_repeat_and_odd_labels_are_null_rows(rows):
    X, y = rows
    kw = dict(cv=2, score_epsilon=1.0, random_state=7)
    grid = {"learning_rate": [0.1, 1.0]}
    odd = y.astype(object)
    odd[[2, 9]] = None, 0.5
    nulls = y.copy()
    nulls[[2, 9]] = -1
    a = PrivateGridSearchCV(_base(), grid, **kw).fit(X, odd)
    b = PrivateGridSearchCV(_base(), grid, **kw).fit(X, nulls)
    np.testing.assert_array_equal(a.cv_results_["noisy_correct"], b.cv_results_["noisy_correct"])
    np.testing.assert_array_equal(a.best_estimator_.coef_transformed_, b.best_estimator_.coef_transformed_)
    assert a.privacy_.seeded and a.best_estimator_.privacy_.seeded


def test_on_a_store_split_the_split_ledger_is_charged_once(make_store, rows):
    X, y = rows
    st = make_store({"train": (X, y)})
    search = PrivateGridSearchCV(_base(), {"learning_rate": [0.3]}, cv=2, score_epsilon=1.0).fit(st["train"])
    led = data.as_source(st, "train").ledger()
    assert len(led) == 1 and led.entries[0].mechanism == "privlin.model_selection/PrivateGridSearchCV"
    assert search.best_estimator_.privacy_.ledger == led.where
    assert not search.privacy_.seeded and not search.best_estimator_.privacy_.seeded


@pytest.mark.parametrize("make,match", [
    (lambda: PrivateGridSearchCV(_base(classes=None), {"learning_rate": [0.1]}, score_epsilon=1.0), "class list"),
    (lambda: PrivateGridSearchCV(_base(), {"ledger": [None]}, score_epsilon=1.0), "may not vary"),
    (lambda: PrivateGridSearchCV(_base(), {"learning_rate": [0.1]}, cv=KFold(3), score_epsilon=1.0), "cv"),
    (lambda: PrivateGridSearchCV(_base(), {"learning_rate": [0.1]}), "score_epsilon"),
    (lambda: PrivateGridSearchCV(_base(), {"learning_rate": [0.1]}, cv=200, score_epsilon=1.0), "at least 200"),
    (lambda: PrivateGridSearchCV(_base(secure_mode=True), {"learning_rate": [0.1]}, score_epsilon=1.0,
                                 random_state=0), "secure_mode"),
])
def test_public_facts_are_checked_before_the_charge(rows, make, match):
    X, y = rows
    led = PrivacyLedger.in_memory()
    search = make()
    search.estimator.set_params(ledger=led)
    with pytest.raises(ValueError, match=match):
        search.fit(X, y)
    assert len(led) == 0


def test_plain_grid_search_on_a_ledger_is_warned_as_unaccounted(rows):
    X, y = rows
    led = PrivacyLedger.in_memory()
    with pytest.warns(privlin.PrivacyLeakWarning, match="PrivateGridSearchCV"):
        GridSearchCV(_base(ledger=led), {"learning_rate": [0.1, 1.0]}, cv=2, error_score="raise").fit(X, y)
    with pytest.warns(privlin.PrivacyLeakWarning, match="cannot tell"):  # no ledger: privlin cannot tell, warns
        _base().fit(X, y).score(X, y)


def test_the_refit_charged_dominates_every_candidates_refit():
    """Charged before the choice: the common event; among full-batch Gaussians the largest μ (GDP is ordered by μ);
    otherwise (Poisson-subsampled plans, whose privacy curves cross) every distinct refit composed."""
    pick = PrivateGridSearchCV._dominating_refit
    g = lambda s, t=1: ev.SelfComposedDpEvent(ev.GaussianDpEvent(s), t)  # noqa: E731
    assert pick([g(3.0), g(3.0)], 1e-5, "replace_special")[0] == g(3.0)
    assert pick([g(3.0, 4), g(1.0), g(2.0, 8)], 1e-5, "replace_special")[0] == g(2.0, 8)  # μ² 0.44, 1, 2
    p = lambda q, s: ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(s)), 50)  # noqa: E731
    both, rule = pick([p(0.01, 1.0), p(0.2, 3.0), p(0.01, 1.0)], 1e-5, "replace_special")
    assert both == ev.ComposedDpEvent([p(0.01, 1.0), p(0.2, 3.0)]) and "composed" in rule


# ----------------------------------------------------------------------------- scores' noise, labels, refit

def test_secure_mode_scores_go_through_the_exact_sampler(monkeypatch):
    """With secure_mode candidates the counts are released by secure_noise (the discrete Gaussian from os.urandom on
    an exact grid), never by the float64 normal; every noisy count is a multiple of that grid."""
    from privlin import model_selection, noise, secure_noise

    calls = []
    real = secure_noise.secure_gaussian_release

    def spy(value, std, sens, rng=None, **kw):
        calls.append((np.asarray(value).copy(), std, sens, kw))
        return real(value, std, sens, rng, **kw)

    monkeypatch.setattr(secure_noise, "secure_gaussian_release", spy)
    real_counts = noise.noisy_counts

    def counts_spy(counts, std, key, *, secure=False, **kw):
        if not secure:
            pytest.fail("float noise on a secure search's scores")
        return real_counts(counts, std, key, secure=secure, **kw)

    monkeypatch.setattr(model_selection, "noisy_counts", counts_spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4)).astype(np.float32)
    y = np.full(40, 7)  # every row null: every exact count is 0
    led = PrivacyLedger.in_memory()
    s = PrivateGridSearchCV(_base(steps=1, noise_multiplier=2.0, secure_mode=True, ledger=led),
                            {"learning_rate": [0.1, 1.0]}, cv=2, score_epsilon=0.5, refit=False).fit(X, y)
    scores = [c for c in calls if c[0].dtype.kind == "i"]  # the fits' own secure releases are float sums
    assert len(scores) == 1 and calls[-1] is scores[0]  # once, after every fold fit
    value, std, sens, kw = scores[0]
    np.testing.assert_array_equal(value, [0, 0])
    assert std == pytest.approx(s.privacy_.score_noise_std) and sens == pytest.approx(math.sqrt(2))
    assert kw["bound"] == 40
    gamma = secure_noise.grid_for(std, 40)
    got = s.cv_results_["noisy_correct"]
    np.testing.assert_array_equal(np.round(got / gamma) * gamma, got)
    assert "discrete Gaussian" in s.privacy_.score_noise and "discrete Gaussian" in str(s.privacy_)
    assert led.entries[0].params["secure_scores"] is True
    # outside secure mode the report says the scores' noise is floating-point, and where that is explained
    monkeypatch.undo()
    s = PrivateGridSearchCV(_base(steps=1, noise_multiplier=2.0), {"learning_rate": [0.1]}, cv=2, score_epsilon=0.5,
                            refit=False, random_state=0).fit(X, y)
    assert "float64" in str(s.privacy_) and "PRIVACY.md" in s.privacy_.score_noise


def test_the_secure_score_release_has_the_stated_std():
    """The release the search makes (privlin.noise.noisy_counts, secure) on integer counts, over 200 000 draws: its mean
    is the count and its variance (σ·inflation)² within 5 standard errors (var of a sample variance: 2σ⁴/(n−1))."""
    from privlin import secure_noise
    from privlin.selection import noisy_counts

    n, count, std = 200_000, 37, 11.3
    out = noisy_counts(np.full(n, count), std, None, secure=True, l2_sensitivity=math.sqrt(n), bound=1000)
    gamma = secure_noise.grid_for(std, 1000)
    expect = std * (1 + gamma)  # secure_gaussian_release's inflation: 1 + γ√size/sensitivity
    noise_ = out - count
    assert abs(noise_.mean()) < 5 * expect / math.sqrt(n)
    assert abs(noise_.var(ddof=1) - expect**2) < 5 * expect**2 * math.sqrt(2 / (n - 1))
    assert abs(stats.kurtosis(noise_)) < 5 * math.sqrt(24 / n)  # Gaussian, not a wider or narrower law
    np.testing.assert_array_equal(np.round(out / gamma) * gamma, out)


class _RaisingEq:
    """A label whose == raises, hashed like class 0 (so a dict lookup compares it with 0)."""

    def __eq__(self, other):
        raise RuntimeError("this label cannot be compared")

    def __hash__(self):
        return 0


@pytest.mark.parametrize("odd", [np.array([1, 2]), _RaisingEq()], ids=["ndarray-label", "raising-eq"])
def test_a_row_label_never_fails_the_search_after_its_charge(rows, odd):
    """One row's odd label is a null row for the search's fits and its correct counts, as for the estimator: the
    search completes with its entry charged, and releases what it releases with that row's label set to -1."""
    X, y = rows
    bad = y.astype(object)
    bad[5] = odd
    nulls = y.copy()
    nulls[5] = -1
    DPLinearClassifier(**_base().get_params()).fit(X, bad)  # the estimator runs on these labels
    led = PrivacyLedger.in_memory()
    kw = dict(cv=2, score_epsilon=1.0, random_state=7)
    a = PrivateGridSearchCV(_base(ledger=led), {"learning_rate": [0.1, 1.0]}, **kw).fit(X, bad)
    assert len(led) == 1 and led.entries[0].mechanism == "privlin.model_selection/PrivateGridSearchCV"
    b = PrivateGridSearchCV(_base(), {"learning_rate": [0.1, 1.0]}, **kw).fit(X, nulls)
    np.testing.assert_array_equal(a.cv_results_["noisy_correct"], b.cv_results_["noisy_correct"])
    np.testing.assert_array_equal(a.best_estimator_.coef_transformed_, b.best_estimator_.coef_transformed_)
    # privlin.evaluate (exact, charged) matches labels the same way
    assert privlin.evaluate(a.best_estimator_, (X, bad), public=True) == privlin.evaluate(
        a.best_estimator_, (X, nulls), public=True)


def test_the_refit_model_reports_the_search_it_came_from(rows):
    X, y = rows
    led = PrivacyLedger.in_memory()
    s = PrivateGridSearchCV(_base(ledger=led), {"learning_rate": [0.1, 1.0]}, cv=2, score_epsilon=1.0,
                            random_state=0).fit(X, y)
    rep = s.best_estimator_.privacy_
    assert rep.epsilon == s.privacy_.epsilon == pytest.approx(led.spent(delta=1e-5)[0], rel=1e-9)
    assert rep.dp_event == s.privacy_.dp_event and rep.delta == s.privacy_.delta
    alone = _gdp_epsilon([4.0] * T, 1e-5)  # the refit by itself: T steps of σ = 4
    assert rep.epsilon > 2 * alone
    text = str(rep)
    assert f"({s.privacy_.epsilon:.4g}, 1e-05)-DP" in text and "chosen by PrivateGridSearchCV" in text
    assert f"this refit alone is ({alone:.4g}" in text
