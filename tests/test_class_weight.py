"""Public class weights: each row's contribution scaled by its class's weight ≤ 1 before the sums that
bound it, so the guarantee is the unweighted fit's; "balanced" (private counts) and weights above 1 refused."""
import warnings

import jax
import numpy as np
import pytest

from privlin import DPLinearClassifier, sensitivity, train
from privlin.noise import make_key

W = (1.0, 0.25, 0.6)


def rows(seed=0, n=300, d=6, k=3):
    rng = np.random.default_rng(seed)
    X = (rng.normal(size=(n, d)) * rng.uniform(0.2, 3, size=(n, 1))).astype(np.float32)
    y = rng.integers(0, k, n)
    return X, np.asarray(jax.nn.one_hot(y, k)), y


@pytest.mark.parametrize("method", ["sgd", "adam1"])
def test_weighted_sums_are_the_per_class_sums_times_the_weights_and_move_by_at_most_the_clip(method):
    """Against the unweighted sum of each class alone, scaled by its weight afterwards (an independent route), and
    every zero-out neighbour moves the weighted sum by at most C (the guarantee), and by about C·w_y (its weight)."""
    X, Y, y = rows()
    n, C = len(y), 0.7
    mask = np.ones(n, np.float32)
    params = train.init_params(X.shape[1], 3, -10.0)
    params = train.LinearParams(params.W + 0.3, params.b)

    def total(mask, cw):
        if method == "sgd":
            g = train.clipped_grad_sum(params, X, Y, mask, C, n, fit_intercept=True, class_weight=cw)
            return np.concatenate([np.ravel(g.W), np.ravel(g.b)])
        acc = train.class_sums_update(train.class_sums_init(X.shape[1], 3), X, Y, mask, C, n, fit_intercept=True,
                                      class_weight=cw)
        g = train.adam1_gradient(acc)
        return np.concatenate([np.ravel(g.W), np.ravel(g.b)])

    with sensitivity.x64():
        got = total(mask, W)
        want = sum(w * total(mask * (y == c), None) for c, w in enumerate(W))
        assert np.allclose(got, want, atol=1e-5 * n * C)
        for j in range(0, n, 37):
            null = mask.copy()
            null[j] = 0.0
            moved = np.linalg.norm(got - total(null, W))
            assert moved <= C and moved <= C * W[y[j]] * (1 + 1e-5)


def test_unit_weights_are_the_unweighted_fit_and_a_weight_moves_predictions():
    X, _, y = rows(1, n=400)
    base = dict(epsilon=8.0, classes=[0, 1, 2], random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = DPLinearClassifier(**base).fit(X, y)
        ones = DPLinearClassifier(**base, class_weight={0: 1, 1: 1.0}).fit(X, y)
        light = DPLinearClassifier(**base, class_weight={1: 0.05}).fit(X, y)
    np.testing.assert_array_equal(ones.coef_transformed_, plain.coef_transformed_)
    assert (light.predict(X) == 1).mean() < (plain.predict(X) == 1).mean()
    assert light.privacy_.epsilon == plain.privacy_.epsilon and light.privacy_.dp_event == plain.privacy_.dp_event
    assert "class weights (public" in light.privacy_.notes and "0.05" in light.privacy_.notes


def test_streamed_weighted_fit_is_the_in_memory_one(make_store):
    X, _, y = rows(2, n=500)
    store = make_store({"train": (X, y)})
    p = dict(epsilon=4.0, classes=[0, 1, 2], random_state=3, class_weight={2: 0.5}, method="sgd", steps=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = DPLinearClassifier(**p).fit(store)
        b = DPLinearClassifier(**p, memory_limit=0, block_rows=128).fit(store)
    np.testing.assert_allclose(a.coef_transformed_, b.coef_transformed_, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad, says", [("balanced", "private counts"), ({0: 2.0}, r"\(0, 1\]"),
                                       ({7: 0.5}, "not in the class list"), ({0: float("nan")}, r"\(0, 1\]")])
def test_refused_in_one_line_before_a_row_is_read(bad, says, monkeypatch):
    from privlin import data

    X, _, y = rows(3, n=50)
    read = []
    monkeypatch.setattr(data.ArraySource, "fit_blocks", lambda *a, **k: read.append(1) or iter(()))
    with pytest.raises(ValueError, match=says) as err:
        DPLinearClassifier(epsilon=1.0, classes=[0, 1, 2], class_weight=bad).fit(X, y)
    assert "\n" not in str(err.value) and not read
