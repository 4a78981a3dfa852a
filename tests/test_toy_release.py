"""A new release is one module and one registration line: the toy release of ``toy_release.py``,
registered by one ``releases.register`` call, is seen in the plan's event and ε (recomposed here with
dp-accounting's own accountant), the report, the ledger entry, the secure-mode table, the sweep's record and the
fitted model, and streams exactly as it runs in memory; with privlin changed nowhere."""
import math

import numpy as np
import pytest
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant

import toy_release
from privlin import DPLinearClassifier, releases
from privlin.accounting import relation
from privlin.ledger import PrivacyLedger
from privlin.plan import make_plan
from privlin.sweep import sweep

PARAMS = {"method": "sgd", "epsilon": 2.0, "steps": 10, "classes": [0, 1, 2]}


def registered(monkeypatch):
    monkeypatch.setattr(releases, "REGISTRY", releases.REGISTRY)  # restored after the test
    releases.register(toy_release.POSITIVE)  # the one line that adds the release


def _gaussians(event):
    """Every Gaussian noise multiplier of a dp-accounting event, each with how many times it composes."""
    if isinstance(event, ev.GaussianDpEvent):
        return [(event.noise_multiplier, 1)]
    if isinstance(event, ev.SelfComposedDpEvent):
        return [(s, c * event.count) for s, c in _gaussians(event.event)]
    if isinstance(event, ev.ComposedDpEvent):
        return [x for e in event.events for x in _gaussians(e)]
    raise AssertionError(f"unexpected event {event}")


def _pld_epsilon(plan):
    """ε of the plan's σ's composed by dp-accounting's PLD accountant directly (not privlin.accounting)."""
    acc = pld_privacy_accountant.PLDAccountant(relation(plan.neighbouring), value_discretization_interval=1e-4)
    for name, s in plan.noise_multipliers().items():
        if name != "step":
            for stage in plan.release(name).events(s):
                acc.compose(ev.GaussianDpEvent(stage))
    acc.compose(ev.GaussianDpEvent(plan.sigma), plan.steps)
    return acc.get_epsilon(plan.delta)


def _data(blobs, n=300):
    X, y = blobs(n, d=6, k=3, seed=5)
    return X + 0.3, y


@pytest.mark.unit
def test_the_plan_buys_it_and_derives_its_event_secure_table_and_ledger_params(monkeypatch):
    n = 300
    base = make_plan(PARAMS, n=n, dim=6, n_classes=3)
    registered(monkeypatch)
    assert "positive" not in base.noise_multipliers()
    plan = make_plan(PARAMS, n=n, dim=6, n_classes=3)
    names = [r.name for r, _ in plan.chain]
    assert names[names.index("positive") - 1] == "radius"  # it runs right after the release it names
    sigma = plan.sigma_of("positive")
    assert 0 < sigma < math.inf and plan.budget_shares()["positive"] == pytest.approx(toy_release.SHARE, rel=1e-9)
    assert (sigma, 1) in _gaussians(plan.dp_event()) and plan.epsilon == pytest.approx(2.0, rel=1e-6)
    assert plan.epsilon == pytest.approx(_pld_epsilon(plan), rel=2e-3)
    assert plan.sigma > base.sigma  # the same ε: the steps get less of the budget
    assert plan.secure_table()["positive"] == (sigma, 1.0, float(n))
    assert plan.ledger_params(seeded=False)["sigma_positive"] == sigma


def test_it_is_in_the_report_ledger_model_and_sweep_and_streams_as_in_memory(monkeypatch, blobs, tmp_path):
    registered(monkeypatch)
    X, y = _data(blobs)
    truth = int((X[:, 0] > 0).sum())
    led = PrivacyLedger(tmp_path / "ledger.json")
    fits = {}
    for path, extra in (("memory", {}), ("streamed", {"memory_limit": 1, "block_rows": 64})):
        est = DPLinearClassifier(**PARAMS, random_state=11, ledger=led, **extra).fit(X, y)
        sigma = est.plan_.sigma_of("positive")
        assert est.privacy_.noise_multipliers["positive"] == sigma
        assert "rows with a positive first coordinate" in est.privacy_.notes
        assert est.released_["positive"].shape == (1,) and est.extra_["positive"] is est.released_["positive"]
        assert abs(float(est.released_["positive"][0]) - truth) < 6 * sigma
        fits[path] = est
    assert [e.params["sigma_positive"] for e in led.entries] == [sigma, sigma]
    mem, streamed = fits["memory"], fits["streamed"]
    # the same exact count and key: equal up to how each compiled program rounds the float64 noise draw
    np.testing.assert_allclose(mem.released_["positive"], streamed.released_["positive"], rtol=1e-6)
    np.testing.assert_allclose(mem.coef_transformed_, streamed.coef_transformed_, rtol=1e-5, atol=1e-6)
    for extra in ({}, {"memory_limit": 1, "block_rows": 64}):  # without noise: the exact count on both paths
        with pytest.warns(Warning, match="NON-PRIVATE"):
            exact = DPLinearClassifier(**{**PARAMS, "epsilon": math.inf}, random_state=0, **extra).fit(X, y)
        assert exact.released_["positive"][0] == truth

    res = sweep((X, y), epsilon=[2.0], method="sgd", steps=10, classes=[0, 1, 2], random_state=11, eval_split=None,
                progress=False)
    rec = res.records[0]
    assert rec["report"].noise_multipliers["positive"] == rec["plan"].sigma_of("positive")
    assert res.values[0]["positive"] is rec["values"]["positive"]
    assert abs(float(rec["values"]["positive"][0]) - truth) < 6 * rec["plan"].sigma_of("positive")
    np.testing.assert_array_equal(res.model(0).released_["positive"], rec["values"]["positive"])
