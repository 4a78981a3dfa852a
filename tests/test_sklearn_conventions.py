"""The estimator as scikit-learn users read it: coef_ only where it is an exact input-space map,
the transformed weights under their own names, a store's class names as classes_, one-line refusals of what DP does
not allow, the labelled non-private label check, and one name for the neighbouring relation."""
import math

import numpy as np
import pandas as pd
import pytest
from dp_accounting import dp_event as _ev
from sklearn.utils.validation import has_fit_parameter

import privlin
from privlin import DPLinearClassifier
from privlin.ledger import PrivacyBudgetExceeded, PrivacyLedger

FAST = dict(epsilon=8.0, steps=10, random_state=0)
NAMES = ["circle", "square", "triangle"]


def _frame(X):
    return pd.DataFrame(X, columns=[f"feat_{i}" for i in range(X.shape[1])])


@pytest.fixture(scope="module")
def binary(blobs):
    X, y = blobs(200, d=30, k=2, seed=1)
    return _frame(X), y


@pytest.fixture(scope="module")
def normalized(binary):
    """A default (normalized, centered, ...) binary fit on 30 named features: the issue's case."""
    X, y = binary
    return DPLinearClassifier(classes=[0, 1], **FAST).fit(X, y)


def test_binary_coef_is_one_exact_input_space_row_without_normalization(binary):
    X, y = binary
    m = DPLinearClassifier(normalize=False, center=False, classes=[0, 1], **FAST).fit(X, y)
    assert m.coef_.shape == (1, 30) and m.intercept_.shape == (1,)
    pairs = dict(zip(m.feature_names_in_, m.coef_[0]))  # each input feature with its own weight
    W, b = m.coef_transformed_, m.intercept_transformed_
    assert pairs["feat_7"] == W[1, 7] - W[0, 7] and m.intercept_[0] == b[1] - b[0]
    margin = X.to_numpy(np.float64) @ m.coef_[0] + m.intercept_[0]
    np.testing.assert_allclose(m.decision_function(X), margin, rtol=1e-5, atol=1e-5 * np.abs(margin).max())
    sure = np.abs(margin) > 1e-3 * np.abs(margin).max()
    assert sure.mean() > 0.9
    np.testing.assert_array_equal(m.predict(X)[sure], m.classes_[(margin > 0).astype(int)][sure])
    assert list(m.transformed_feature_names_) == list(X.columns)  # without normalization: the input features


def test_multiclass_coef_is_one_row_per_class_without_normalization(blobs):
    X, y = blobs(150, d=5, k=3, seed=2)
    m = DPLinearClassifier(normalize=False, center=False, classes=[0, 1, 2], **FAST).fit(X, y)
    assert m.coef_.shape == (3, 5) and m.intercept_.shape == (3,)
    Z = X.astype(np.float64) @ m.coef_.T + m.intercept_
    np.testing.assert_allclose(m.decision_function(X), Z, rtol=1e-5, atol=1e-5 * np.abs(Z).max())


def test_normalized_fit_has_no_coef_and_names_its_transformed_weights(normalized, binary):
    X, _ = binary
    m = normalized
    assert not hasattr(m, "coef_") and not hasattr(m, "intercept_")
    with pytest.raises(AttributeError, match="normalize=True.*coef_transformed_"):
        m.coef_
    names = m.transformed_feature_names_
    assert m.coef_transformed_.shape == (2, len(names)) == (2, m.plan_.model_dim)
    assert m.intercept_transformed_.shape == (2,)
    assert not set(names) & set(m.feature_names_in_)  # no transformed weight carries an input feature's name
    assert list(names[:30]) == [f"transformed{i}" for i in range(30)]
    if m.plan_.radial:
        assert list(names[30:]) == ["log_norm"]
    # the predictions read the transformed weights, as trained: the logits are the transformed rows times them
    from privlin import runner
    Xp = np.asarray(runner.preprocess_rows(m.plan_, X.to_numpy(np.float32), m.mean_, m.scaling_, m.radius_),
                    np.float64)
    Z = Xp @ m.coef_transformed_.T + m.intercept_transformed_
    np.testing.assert_allclose(m.decision_function(X), Z[:, 1] - Z[:, 0], rtol=1e-4, atol=1e-5)


def test_store_fit_classes_are_the_published_names(make_store, blobs):
    (Xtr, ytr), (Xte, yte) = blobs(240, d=8, k=3, seed=3), blobs(90, d=8, k=3, seed=4)
    store = make_store({"train": (Xtr, ytr), "test": (Xte, yte)}, attrs={"backbone": "test", "classes": NAMES})
    named = privlin.fit(store, **FAST)
    assert named.classes_.tolist() == NAMES
    predicted = named.predict(Xte)
    assert set(predicted) <= set(NAMES)
    accuracy = privlin.evaluate(named, store, "test", public=True)
    assert accuracy == pytest.approx(np.mean(predicted == np.asarray(NAMES)[yte])) and accuracy > 0.8
    indexed = privlin.fit(store, classes=[0, 1, 2], **FAST)  # a list given is the list kept
    assert indexed.classes_.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(indexed.coef_transformed_, named.coef_transformed_)  # the same fit
    assert privlin.evaluate(indexed, store, "test", public=True) == accuracy


def test_sample_weight_partial_fit_and_fit_params_are_refused_in_one_line(binary):
    X, y = binary
    led = PrivacyLedger.in_memory()
    est = DPLinearClassifier(classes=[0, 1], ledger=led, **FAST)
    with pytest.raises(TypeError, match=r"^fit\(\) takes no sample_weight: the DP noise is calibrated") as e:
        est.fit(X, y, sample_weight=np.ones(len(y)))
    assert "\n" not in str(e.value)
    with pytest.raises(TypeError, match="takes no check_input"):
        est.fit(X, y, check_input=False)
    assert led.entries == [] and not hasattr(est, "classes_")  # refused before any charge
    assert not has_fit_parameter(est, "sample_weight")  # scikit-learn's tools see no weighted fit
    assert not hasattr(est, "partial_fit")
    with pytest.raises(AttributeError, match="no partial_fit: each fit is one charged DP release"):
        est.partial_fit(X, y)
    # public class weights ≤ 1 are supported (tests/test_class_weight.py); warm starts are not
    assert "warm_start" not in est.get_params() and est.get_params()["class_weight"] is None


def test_check_labels_counts_labels_outside_the_list_and_charges_a_non_private_event():
    y = np.array([0, 1, 1, 7, 0, 2, 1, -1])
    classes = [0, 1]
    assert privlin.check_labels(y, classes) == int(np.sum(~np.isin(y, classes))) == 3  # no ledger: nothing charged
    led = PrivacyLedger.in_memory()
    assert privlin.check_labels(list(y), classes, ledger=led) == 3
    (entry,) = led.entries
    assert isinstance(entry.event, _ev.NonPrivateDpEvent) and "non-private" in entry.mechanism
    assert math.isinf(led.spent()[0])
    capped = PrivacyLedger.in_memory(cap=(1.0, 1e-5))
    with pytest.raises(PrivacyBudgetExceeded):
        privlin.check_labels(y, classes, ledger=capped)
    with pytest.raises(ValueError, match="public class list"):
        privlin.check_labels(y)
    fresh = PrivacyLedger.in_memory()
    with pytest.raises(ValueError, match="strings but the labels are not"):  # names against indices: public facts
        privlin.check_labels(y, ["cat", "dog"], ledger=fresh)
    assert fresh.entries == []


def test_check_labels_on_a_store_charges_its_ledger(make_store, blobs):
    X, y = blobs(64, d=4, k=3, seed=5)
    y[[3, 10]] = 9  # a label mix-up: outside the published list
    store = make_store({"train": (X, y)}, attrs={"backbone": "test", "classes": NAMES})
    assert privlin.check_labels(store) == 2
    from privlin import data
    (entry,) = data.as_source(store, "train").ledger().entries
    assert isinstance(entry.event, _ev.NonPrivateDpEvent)


def test_relation_reads_zero_out_with_dp_accountings_name_beside_it(normalized):
    text = str(normalized.privacy_)
    assert "zero-out (dp-accounting: replace_special) neighbours" in text and normalized.privacy_.neighbouring == \
        "replace_special"  # records keep dp-accounting's name
    led = PrivacyLedger.in_memory()
    led.charge(_ev.GaussianDpEvent(5.0), mechanism="m", epsilon=1.0, delta=1e-5)
    assert "[zero-out (dp-accounting: replace_special) neighbours]" in led.summary().splitlines()[0]
    with pytest.raises(ValueError, match=r"zero-out \(dp-accounting: replace_special\) neighbours; this mechanism is "
                                         r"under substitution \(dp-accounting: replace_one\)"):
        led.charge(_ev.GaussianDpEvent(5.0), mechanism="m", epsilon=1.0, delta=1e-5, neighbouring="replace_one")
