"""Fixed-key results recorded before privlin's restructuring: every fit must give the same numbers.

``tests/golden/make_golden.py`` recorded ``golden.npz`` at main ae126af (= 8eb666c's code for privlin); each case is
refit here with the same ``random_state`` and compared within float rounding.  A change that moves a key split or
a sum's order fails here: then say why, and show the accuracy tables unchanged instead.
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "golden"))
import make_golden  # noqa: E402

GOLDEN = np.load(make_golden.GOLDEN)
RTOL, ATOL = 1e-5, 1e-6  # float32 rounding of weights of order 1


def _same(name, coef, intercept):
    np.testing.assert_allclose(coef, GOLDEN[f"{name}/coef"], rtol=RTOL, atol=ATOL, err_msg=name)
    np.testing.assert_allclose(intercept, GOLDEN[f"{name}/intercept"], rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("name", sorted(make_golden.cases()))
def test_estimator_fit_equals_recorded(name):
    _same(name, *make_golden.fit_case(make_golden.cases()[name]))


def test_sweep_models_equal_recorded():
    got = make_golden.sweep_case()
    assert len(got) == len(make_golden.SWEEP["epsilon"]) * len(make_golden.SWEEP["method"])
    for i, (c, b) in enumerate(got):
        _same(f"sweep{i}", c, b)


def test_store_fit_equals_recorded():
    _same("store", *make_golden.store_case())


def test_golden_file_covers_every_case():
    names = {k.split("/")[0] for k in GOLDEN.files}
    assert set(make_golden.cases()) | {"store"} <= names
