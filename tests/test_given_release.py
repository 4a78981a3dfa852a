"""A release's value may be given rather than released (public statistics, privlin.public): the plan made with
``given`` names takes no share, σ or event for them and charges nothing for them; the fit uses the given values
through the release's own ``use``, exactly as if released — in memory and streamed."""
import math

import numpy as np
import pytest

from privlin import data, noise, runner, workflow
from privlin.plan import make_plan

PARAMS = {"method": "sgd", "epsilon": 2.0, "steps": 10, "radial": False, "recenter": False}


def _fit(X, y, params, given=None, **extra):
    (fitted,) = workflow.fit_plans(data.as_source((X, y)), [params], [noise.make_key(3).key], seeded=True,
                                   classes=np.arange(3), budget=None, ledger=None, charge=lambda led, plans: None,
                                   block_rows=extra.get("block_rows", 1 << 16),
                                   memory_limit=extra.get("memory_limit", 1 << 30), verbose=False, given=given)
    return fitted


@pytest.mark.unit
def test_a_given_release_takes_no_share_no_sigma_and_no_event():
    bought = make_plan(PARAMS, n=500, dim=6, n_classes=3)
    plan = make_plan(PARAMS, n=500, dim=6, n_classes=3, given=("center",))
    assert [r.name for r, _ in plan.given] == ["center"] and "center" not in plan.noise_multipliers()
    assert plan.sigma_of("center") == math.inf and "center" not in plan.budget_shares()
    stages = len(bought.release("center").events(bought.sigma_center))  # the centering's Gaussians, gone
    assert len(plan.dp_event().events) == len(bought.dp_event().events) - stages
    assert plan.epsilon == pytest.approx(2.0, rel=1e-6) and plan.sigma < bought.sigma  # its share goes to training
    params = plan.ledger_params(seeded=False)
    assert params["sigma_center"] is None and params["given"] == ["center"]
    assert [r.name for r in plan.ran][:2] == ["center", "scale"] and plan.model_dim == 6
    with pytest.raises(ValueError, match="no such release"):
        make_plan(PARAMS, n=500, dim=6, n_classes=3, given=("nope",))


def test_the_fit_uses_a_given_value_as_if_released(blobs):
    X, y = blobs(500, d=6, k=3, seed=2)
    X = X + 1.5
    params = {**PARAMS, "epsilon": math.inf}  # no noise: the given mean in place of the released one changes nothing
    with pytest.warns(Warning, match="NON-PRIVATE"):
        released = _fit(X, y, params)
    mean = np.asarray(released.values["center"], np.float32)
    for extra in ({}, {"memory_limit": 1, "block_rows": 128}):
        with pytest.warns(Warning, match="NON-PRIVATE"):
            given = _fit(X, y, params, {"center": mean}, **extra)
        assert [r.name for r, _ in given.plan.given] == ["center"]
        np.testing.assert_array_equal(given.mean, mean.astype(np.float64))
        np.testing.assert_allclose(given.coef, released.coef, rtol=1e-5, atol=1e-6)
        for a, b in zip(given.scaling, released.scaling):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
        rows = runner.preprocess_rows(given.plan, X[:5], values=given.values)
        np.testing.assert_allclose(rows, runner.preprocess_rows(released.plan, X[:5], values=released.values),
                                   rtol=1e-5, atol=1e-6)
    with pytest.warns(Warning, match="NON-PRIVATE"):  # another given mean: another model (the value is used)
        other = _fit(X, y, params, {"center": np.zeros_like(mean)})
    assert np.abs(other.coef - released.coef).max() > 1e-3
