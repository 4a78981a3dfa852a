"""The scikit-learn surface's non-private paths say so and its rough edges: ``score``
warns with or without a ledger (so ``GridSearchCV`` and ``cross_val_score`` do), per-row outputs on rows known private
warn, ``privlin.fit(X, y, epsilon=1)`` works, and ``coef_``'s condition reads the same in README and in the error."""
import pathlib
import warnings

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV, cross_val_score

import privlin
from privlin import DPLinearClassifier, PrivacyLeakWarning, data
from privlin.ledger import PrivacyLedger

README = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.fixture(scope="module")
def rows(blobs):
    return blobs(80, d=6, k=3, seed=11)


def _est(**kw):
    return DPLinearClassifier(**{"epsilon": 2.0, "steps": 2, "classes": range(3), "random_state": 0, **kw})


def test_score_warns_with_or_without_a_ledger_so_sklearn_search_and_cv_do(rows):
    X, y = rows
    plain = _est().fit(X, y)
    with pytest.warns(PrivacyLeakWarning, match="cannot tell whether they are private"):
        acc = plain.score(X, y)
    assert acc == pytest.approx(np.mean(plain.predict(X) == y))
    with pytest.warns(PrivacyLeakWarning, match="score"):
        GridSearchCV(_est(), {"learning_rate": [0.1, 1.0]}, cv=2, error_score="raise").fit(X, y)
    with pytest.warns(PrivacyLeakWarning, match="score"):
        cross_val_score(_est(), X, y, cv=2, error_score="raise")
    # a scoring string predicts instead: warned where the folds' model is on a ledger
    with pytest.warns(PrivacyLeakWarning, match="predict"):
        cross_val_score(_est(ledger=PrivacyLedger.in_memory()), X, y, cv=2, scoring="accuracy", error_score="raise")


def test_per_row_outputs_warn_where_the_rows_are_known_private(rows, make_store):
    X, y = rows
    st = make_store({"train": (X, y), "test": (X[:30], y[:30])})
    model = _est().fit(X, y)
    with warnings.catch_warnings():  # arrays, no ledger on the model: privlin cannot know, says nothing
        warnings.simplefilter("error", PrivacyLeakWarning)
        expect = model.predict(X[:30])
        model.predict_proba(X[:30]), model.decision_function(X[:30])
    with pytest.warns(PrivacyLeakWarning, match="a store split"):
        got = model.predict(st["test"])
    np.testing.assert_array_equal(got, expect)
    with pytest.warns(PrivacyLeakWarning, match="a store split"):
        np.testing.assert_allclose(model.predict_proba(data.as_source(st, "test")), model.predict_proba(X[:30]))
    with pytest.raises(ValueError, match="which split"):
        model.predict(st)
    on_ledger = _est(ledger=PrivacyLedger.in_memory()).fit(X, y)
    for what in ("predict", "predict_proba", "decision_function"):
        with pytest.warns(PrivacyLeakWarning, match=f"{what}\\(\\) returns one exact output per row"):
            getattr(on_ledger, what)(X)


def test_privlin_fit_takes_scikit_learns_order(rows):
    X, y = rows
    a = privlin.fit(X, y, epsilon=1, steps=2, classes=range(3), random_state=0, progress=False)
    b = DPLinearClassifier(epsilon=1, steps=2, classes=range(3), random_state=0).fit(X, y)
    np.testing.assert_array_equal(a.coef_transformed_, b.coef_transformed_)
    assert a.privacy_.epsilon == 1
    c = privlin.fit((X, y), epsilon=1, steps=2, classes=range(3), random_state=0, progress=False)
    np.testing.assert_array_equal(a.coef_transformed_, c.coef_transformed_)
    with pytest.raises(TypeError, match=r"privlin.fit\(data, epsilon=1.0\)") as err:
        privlin.fit(X, 1.0)
    assert "\n" not in str(err.value)


def test_coef_exists_exactly_as_the_readme_says(rows):
    X, y = rows
    assert "`coef_` and `intercept_` exist with `normalize=False, center=False`" in README
    with pytest.raises(ValueError, match="pass normalize=False, center=False") as err:
        _est(normalize=False).fit(X, y)
    assert "\n" not in str(err.value)
    m = _est(normalize=False, center=False).fit(X, y)
    np.testing.assert_allclose(m.decision_function(X), X @ m.coef_.T + m.intercept_, rtol=1e-4, atol=1e-4)


def test_readme_says_what_each_sklearn_path_does():
    for phrase in ("`score` warns (`PrivacyLeakWarning`) whether or not", "make_pipeline(StandardScaler()",
                   "cross_val_score", "privlin.fit(X, y, epsilon=1)"):
        assert phrase in README, phrase
