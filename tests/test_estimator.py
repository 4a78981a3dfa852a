"""DPLinearClassifier: the digits accuracy, the scikit-learn contract, the privacy report, clear errors."""
import json
import warnings

import numpy as np
import pytest
from closed_forms import gaussians, gdp_epsilon, mu_of
from dp_accounting.pld import pld_privacy_accountant
from sklearn.base import clone
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils.estimator_checks import parametrize_with_checks

import privlin
from privlin import DPLinearClassifier

@pytest.mark.parametrize("epsilon,floor", [(1.0, 0.86), (8.0, 0.93)])
def test_digits_accuracy_with_hyperparameters_fixed_in_advance(digits, epsilon, floor):
    """Default method (full-batch DP-SGD, DP-RandP): T=100, lr = 0.008·N/σ from DP-RandP Table 22, not tuned here."""
    Xtr, Xte, ytr, yte = digits
    accs = []
    for seed in range(5):
        m = DPLinearClassifier(epsilon=epsilon, delta=1e-5, classes=range(10), random_state=seed).fit(Xtr, ytr)
        assert m.privacy_.epsilon <= epsilon
        accs.append(m.score(Xte, yte))
    assert np.mean(accs) >= floor, accs


def test_privacy_report_is_recomputable_with_dp_accounting(digits):
    Xtr, _, ytr, _ = digits
    m = DPLinearClassifier(epsilon=2.0, classes=range(10), random_state=0).fit(Xtr, ytr)
    r = m.privacy_
    assert (r.accountant, r.neighbouring, r.steps, r.sample_rate, r.seeded) == ("gdp", "replace_special", 100, 1.0, True)
    assert r.epsilon == pytest.approx(2.0, rel=1e-6) and r.epsilon <= 2.0 and r.delta == 1e-5
    assert set(r.noise_multipliers) == {"radius", "center", "scale", "whiten", "step"}  # every mechanism, in the event below
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(r.dp_event)
    assert acc.get_epsilon(1e-5) == pytest.approx(r.epsilon, rel=1e-3)
    assert gdp_epsilon(mu_of(gaussians(r.dp_event)), 1e-5) == pytest.approx(r.epsilon, rel=1e-9)  # GDP, exactly
    json.dumps(r.to_dict())  # serializable
    assert "(2, 1e-05)-DP" in str(r)
    assert not DPLinearClassifier(epsilon=2.0, classes=range(10)).fit(Xtr, ytr).privacy_.seeded


def test_seeded_fits_repeat_and_unseeded_fits_differ(digits):
    Xtr, _, ytr, _ = digits
    kw = dict(epsilon=1.0, classes=range(10), method="adam1")
    a = DPLinearClassifier(random_state=4, **kw).fit(Xtr, ytr)
    b = DPLinearClassifier(random_state=4, **kw).fit(Xtr, ytr)
    c = DPLinearClassifier(**kw).fit(Xtr, ytr)
    assert np.array_equal(a.coef_transformed_, b.coef_transformed_)
    assert not np.array_equal(a.coef_transformed_, c.coef_transformed_)


@pytest.mark.parametrize("seed", [lambda: 2**40, lambda: np.random.default_rng(7), lambda: np.random.RandomState(7)],
                         ids=["int above 2**32", "numpy Generator", "RandomState"])
def test_every_documented_random_state_is_accepted_repeats_and_says_seeded(digits, seed):
    Xtr, _, ytr, _ = digits
    kw = dict(epsilon=1.0, classes=range(10), method="adam1")
    a, b = (DPLinearClassifier(random_state=seed(), **kw).fit(Xtr, ytr) for _ in range(2))
    assert np.array_equal(a.coef_transformed_, b.coef_transformed_) and a.privacy_.seeded


def test_minibatch_method_uses_pld_and_meets_budget(digits):
    Xtr, Xte, ytr, yte = digits
    m = DPLinearClassifier(epsilon=4.0, method="minibatch", steps=50, batch_size=256, classes=range(10),
                           random_state=0).fit(Xtr, ytr)
    assert m.privacy_.accountant == "pld" and m.privacy_.epsilon <= 4.0
    assert m.privacy_.sample_rate == pytest.approx(256 / len(ytr))
    assert m.score(Xte, yte) > 0.8


def test_inferring_classes_warns_and_is_recorded():
    X, y = np.random.default_rng(0).normal(size=(40, 3)), np.arange(40) % 2
    with pytest.warns(privlin.PrivacyLeakWarning, match="classes"):
        m = DPLinearClassifier(steps=2, random_state=0).fit(X, y)
    assert m.privacy_.leaks == ("classes",)
    with warnings.catch_warnings():
        warnings.simplefilter("error", privlin.PrivacyLeakWarning)
        m = DPLinearClassifier(steps=2, classes=[0, 1], random_state=0).fit(X, y)
    assert m.privacy_.leaks == () and m.decision_function(X).shape == (40,)
    assert m.predict_proba(X).shape == (40, 2) and np.allclose(m.predict_proba(X).sum(1), 1)


@pytest.mark.parametrize("params,X,y,match", [
    (dict(epsilon=0.0), None, None, "epsilon"),
    (dict(epsilon=-1.0), None, None, "epsilon"),
    (dict(delta=0.0), None, None, "delta"),
    (dict(delta=1.0), None, None, "delta"),
    (dict(), "nan", None, "NaN"),
    (dict(), None, "one", "2 classes"),
    (dict(), None, "short", "inconsistent"),
    (dict(epsilon=None), None, None, "noise_multiplier"),
    (dict(neighbouring="add_or_remove_one"), None, None, "neighbouring"),
    (dict(method="adam1", steps=3), None, None, "single step"),
])
def test_bad_input_raises_clear_value_error(params, X, y, match):
    rng = np.random.default_rng(0)
    Xv, yv = rng.normal(size=(30, 4)), np.arange(30) % 2
    if X == "nan":
        Xv[3, 1] = np.nan
    if y == "one":
        yv = np.zeros(30, int)
    elif y == "short":
        yv = yv[:-1]
    elif y == "three":
        yv = np.arange(30) % 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privlin.PrivacyLeakWarning)
        with pytest.raises(ValueError, match=match):
            DPLinearClassifier(**{"steps": 2, **params}).fit(Xv, yv)


def test_works_in_pipeline_and_clone(digits):
    Xtr, Xte, ytr, yte = digits
    est = DPLinearClassifier(epsilon=8.0, classes=range(10), random_state=0)
    pipe = make_pipeline(FunctionTransformer(lambda X: X * 16.0), est).fit(Xtr, ytr)
    assert pipe.score(Xte, yte) > 0.9
    c = clone(est)
    assert c.get_params() == est.get_params() and not hasattr(c, "coef_")
    c.set_params(epsilon=4.0, method="adam1")
    assert c.fit(Xtr, ytr).privacy_.epsilon <= 4.0


#: scikit-learn checks replaced by a test of ours, with the reason.  None of the others fail at the settings below
#: (ε=8, T=10 on the checks' small, well-separated data); at ε=1 with tiny n, the accuracy checks
#: (check_classifiers_train needs > 0.83) could fail by design: the noise is calibrated to ε, not to the data.
#: The model runs in float32 (XLA): a row's preprocessed features and logits round differently with the number of
#: rows predicted at once, by ~1e-7 relative (2.6e-7 absolute seen on this check's blobs), above the check's atol of
#: 1e-7 on some noise draws and compile settings (it was a non-strict xfail that passed at this seed).
#: :func:`test_methods_are_subset_invariant_within_float32_rounding` checks what holds.
REPLACED_CHECKS = {
    "check_methods_subset_invariance": "float32 rounding differs by batch size (~1e-7), above the check's atol "
                                       "1e-7: test_methods_are_subset_invariant_within_float32_rounding instead",
    "check_class_weight_classifiers": "weights above 1 ({0: 1000, 1: 0.0001}) are refused (a row would move a sum "
                                      "by more than the clip): tests/test_class_weight.py instead",
}


@parametrize_with_checks([DPLinearClassifier(epsilon=8.0, steps=10, random_state=0)])
def test_sklearn_estimator_checks(estimator, check):
    name = getattr(check, "func", check).__name__
    if name in REPLACED_CHECKS:
        pytest.skip(REPLACED_CHECKS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privlin.PrivacyLeakWarning)
        check(estimator)


def test_methods_are_subset_invariant_within_float32_rounding(blobs):
    """Predicting rows in batches gives the same labels, and scores within float32 rounding, as all at once."""
    X, y = blobs(300, d=8, k=3, seed=5)
    est = DPLinearClassifier(epsilon=8.0, steps=10, random_state=0, classes=[0, 1, 2]).fit(X, y)
    for method in ("predict", "decision_function", "predict_proba"):
        whole = getattr(est, method)(X)
        parts = np.concatenate([getattr(est, method)(X[a:a + 7]) for a in range(0, len(X), 7)])
        if method == "predict":
            np.testing.assert_array_equal(parts, whole)
        else:
            np.testing.assert_allclose(parts, whole, rtol=1e-5, atol=1e-6)


def test_non_private_baseline_and_meaningless_delta_are_warned(digits):
    from privlin.report import PrivacyLeakWarning

    Xtr, Xte, ytr, yte = digits
    with pytest.warns(PrivacyLeakWarning, match="NON-PRIVATE"):
        m = DPLinearClassifier(epsilon=float("inf"), classes=range(10), random_state=0).fit(Xtr, ytr)
    assert m.privacy_.epsilon == float("inf") and m.score(Xte, yte) >= 0.93  # no noise: the accuracy ceiling
    n = len(ytr)
    with pytest.warns(PrivacyLeakWarning, match="1/N"):
        m = DPLinearClassifier(epsilon=1.0, delta=1.0 / n, classes=range(10), random_state=0).fit(Xtr, ytr)
    assert any("1/N" in leak for leak in m.privacy_.leaks) and "NOT covered" in str(m.privacy_)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)  # δ just below 1/N and a finite ε: no warning
        DPLinearClassifier(epsilon=1.0, delta=0.5 / n, classes=range(10), random_state=0).fit(Xtr, ytr)
