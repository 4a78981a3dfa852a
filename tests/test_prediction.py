"""privlin.prediction: one prediction and one scoring rule for the estimator, the sweep and the search.

On a store that publishes class names and on rows with a non-finite feature, the three surfaces agree with each
other and with counts made here from the models' own predictions: a store's labels are compared as its names
where those are the model's labels, and a non-finite row is never correct and never an error (it stays in the
denominator)."""
import math
import warnings

import numpy as np
import pytest

import privlin
from privlin import DPLinearClassifier, data, model_selection, noise
from privlin.ledger import PrivacyLedger
from privlin.model_selection import PrivateGridSearchCV
from privlin.sweep import correct_counts, sweep

NAMES = np.array(["ant", "bee", "cat", "dog"])
K = len(NAMES)


@pytest.fixture
def named(make_store, blobs):
    """A store with published class names; its train split has one row skipped at extraction (no features)."""
    X, y = blobs(200, d=8, k=K, seed=5)
    valid = np.ones(140, bool)
    valid[7] = False
    st = make_store({"train": (X[:140], y[:140]), "test": (X[140:], y[140:])}, attrs={"classes": list(NAMES)},
                    valid={"train": valid})
    return st, X, y


def _with_non_finite(X):
    X = np.array(X, np.float32)
    X[0, 1], X[3, 0] = np.nan, np.inf
    return X


def test_the_estimator_and_the_sweep_score_one_way(named):
    st, X, y = named
    Xte, yte = X[140:], y[140:]
    res = sweep(st, epsilon=[2.0], random_state=0, eval_public=True, progress=False)
    model = res.model(0)
    np.testing.assert_array_equal(model.classes_, NAMES)
    predicted = model.predict(Xte)
    np.testing.assert_array_equal(res.predict(0, Xte), predicted)
    # the store's labels index its names, which are the model's classes_: compared as names
    expected = np.mean(predicted == NAMES[yte])
    assert res.records[0]["accuracy"] == expected == privlin.evaluate(model, st, public=True)
    # rows with a NaN or inf feature and name labels: never correct, never an error, in the denominator
    Xn, yn = _with_non_finite(Xte), NAMES[yte]
    finite = np.isfinite(Xn).all(axis=1)
    assert finite.sum() == len(yn) - 2
    right = int(np.sum((predicted == yn) & finite))
    assert privlin.evaluate(model, (Xn, yn), public=True) == right / len(yn)
    assert correct_counts(res, data.ArraySource(Xn, yn)).tolist() == [right]
    again = sweep(st, epsilon=[2.0], random_state=0, eval_data=(Xn, yn), eval_public=True, progress=False)
    assert again.records[0]["accuracy"] == right / len(yn)
    with pytest.raises(ValueError, match="NaN"):  # predict on the caller's own arrays checks them, as sklearn does
        model.predict(Xn)
    led = PrivacyLedger.in_memory()
    with pytest.raises(ValueError, match="5 features; the model was fitted on 8"):  # a public fact: before the charge
        privlin.evaluate(model, (Xte[:, :5], yte), ledger=led)
    assert len(led) == 0


def test_the_search_counts_as_the_estimator_scores(named):
    """The search's exact scores (score_epsilon=inf) equal the estimator's accuracy of each fold model, refitted
    here through the estimator with the search's keys on its folds (the store's skipped row: non-finite)."""
    st, _, _ = named
    base = dict(epsilon=4.0, steps=3, center=False, classes=range(K))
    grid = {"learning_rate": [0.3, 3.0]}
    cv, seed = 2, 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", privlin.PrivacyLeakWarning)  # the exact scores are warned as a leak
        s = PrivateGridSearchCV(DPLinearClassifier(**base), grid, cv=cv, score_epsilon=math.inf,
                                random_state=seed).fit(st)
    source = data.as_source(st, "train")
    Xa, ya = model_selection._read(source, 64)
    assert np.isnan(Xa).any(axis=1).sum() == 1
    n, m = source.n, len(grid["learning_rate"])
    keys = noise.split(noise.make_key(seed).key, cv + 3)
    sizes = [len(p) for p in np.array_split(np.arange(n), cv)]
    fold_of = np.empty(n, np.int64)
    fold_of[model_selection._permutation(keys[0], n)] = np.repeat(np.arange(cv), sizes)
    correct = np.zeros(m)
    for f in range(cv):
        train, valid = fold_of != f, fold_of == f
        for c, lr in enumerate(grid["learning_rate"]):
            est = DPLinearClassifier(**base, learning_rate=lr, random_state=noise.split(keys[3 + f], m)[c])
            est.fit(data.ArraySource(Xa[train], ya[train]))
            correct[c] += privlin.evaluate(est, (Xa[valid], ya[valid]), public=True) * valid.sum()
    np.testing.assert_allclose(s.cv_results_["noisy_correct"], correct, rtol=0, atol=1e-9)
    assert correct.max() <= n - 1  # the skipped row (non-finite here) is never correct, and never an error
