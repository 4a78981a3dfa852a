"""With a public class list, a label outside it is a null row whatever its type: no fit raises because of one
row's label.  The oracle: the fit with a fixed key equals the fit with those rows' labels replaced by
an ordinary out-of-list integer label (the null row of the fast, sorted lookup), bit for bit."""
import math
import warnings

import numpy as np
import pytest

import privlin
from privlin import DPLinearClassifier
from privlin.data import row_labels

K = 3
ODD = [3, 17, 40]  # the rows given odd labels


@pytest.fixture(scope="module")
def rows(blobs):
    X, y = blobs(90, d=8, k=K, seed=21)
    return X, y


def _fit(X, y, classes, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", privlin.PrivacyLeakWarning)  # a public class list: nothing is read to make one
        return DPLinearClassifier(epsilon=2.0, steps=3, classes=classes, random_state=5, **kw).fit(X, y)


def _with(y, values, dtype=None):
    out = np.array(y, dtype=dtype if dtype is not None else y.dtype)
    for i, v in zip(ODD, values):
        out[i] = v
    return out


def _as_list(y, values):
    out = list(y.tolist())
    for i, v in zip(ODD, values):
        out[i] = v
    return out


NUMERIC_CASES = {
    "half": lambda y: _with(y, [0.5, 1.5, 2.5], np.float64),
    "inf": lambda y: _with(y, [math.inf, -math.inf, 1e308], np.float64),
    "nan": lambda y: _with(y, [math.nan] * 3, np.float64),
    "none_in_object_array": lambda y: _with(y, [None, None, None], object),
    "string_among_ints_object": lambda y: _with(y, ["cat", "0", b"1"], object),
    "string_among_floats_list": lambda y: _as_list(y.astype(float), ["x", "1.0", "2"]),
    "none_in_list": lambda y: _as_list(y, [None, math.nan, 0.5]),
    "sequence_among_ints_list": lambda y: _as_list(y, [[1], (0, 1), {"a": 1}]),
}


@pytest.mark.parametrize("case", sorted(NUMERIC_CASES))
def test_an_odd_label_among_numbers_is_a_null_row(rows, case):
    X, y = rows
    odd = NUMERIC_CASES[case](y)
    ref = _fit(X, _with(y, [-1, -1, -1]), classes=range(K))  # the ordinary null row: an int not in the list
    got = _fit(X, odd, classes=range(K))
    np.testing.assert_array_equal(got.coef_transformed_, ref.coef_transformed_)
    np.testing.assert_array_equal(got.intercept_transformed_, ref.intercept_transformed_)
    assert got.privacy_.n_rows == len(y)  # N is public: the null rows still count


def test_an_int_among_string_labels_is_a_null_row(rows):
    X, y = rows
    names = np.array(["ant", "bee", "cat"])
    text = names[y]
    ref = _fit(X, _with(text, ["zzz"] * 3), classes=names)
    for odd in (_as_list(text, [1, 2.0, None]), _with(text.astype(object), [1, np.int64(0), math.nan], object)):
        got = _fit(X, odd, classes=names)
        np.testing.assert_array_equal(got.coef_transformed_, ref.coef_transformed_)


def test_a_sweep_takes_the_same_labels(rows):
    from privlin.sweep import sweep

    X, y = rows
    kw = dict(epsilon=2.0, steps=3, classes=range(K), random_state=5, eval_split=None)
    ref = sweep((X, _with(y, [-1, -1, -1])), **kw)
    got = sweep((X, _as_list(y.astype(float), ["x", math.nan, None])), **kw)
    np.testing.assert_array_equal(got.coef[0], ref.coef[0])


def test_only_public_facts_raise(rows):
    X, y = rows
    with pytest.raises(ValueError, match="inconsistent"):  # a shape
        _fit(X, _as_list(y, [0.5, None, "x"])[:-1], classes=range(K))
    with pytest.raises(ValueError, match="duplicates"):  # the class list itself
        _fit(X, y, classes=[0, 1, 1])
    with pytest.raises(ValueError, match="2 classes"):
        _fit(X, y, classes=[0])
    with pytest.raises(ValueError, match="labels y are required"):
        _fit(X, None, classes=range(K))


def test_row_labels_keeps_each_label_as_given():
    assert row_labels([1, 2, 3]).dtype.kind == "i"
    assert row_labels(["a", "b"]).dtype.kind == "U"  # text stays text: the sorted lookup
    mixed = row_labels([0.0, 1.0, "x"])  # NumPy alone would make every label text ("0.0", "1.0")
    assert mixed.dtype == object and mixed[0] == 0.0 and isinstance(mixed[0], float)
    assert row_labels([1, [1, 2]]).shape == (2,)  # NumPy alone refuses a ragged list
    assert row_labels(np.array([[1], [2]])).shape == (2,)
