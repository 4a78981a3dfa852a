"""Releases as values (issue 35): the chain a plan holds, what it derives, and a release added from outside.

The toy release below (a private row count) is defined here, not in privlin: adding it is one class and one entry
in ``privlin.releases.ADDED``.  It must then appear, with no other change to privlin, in the plan's event and ε,
the report, the ledger entry and the secure-mode table, and run the same streamed as in memory.
"""
import dataclasses
import math

import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant

from privlin import noise, releases
from privlin.accounting import relation
from privlin.plan import make_plan
from privlin.releases import Release


@dataclasses.dataclass(frozen=True)
class Count(Release):
    """The number of non-null rows, with Gaussian noise: one row moves it by 1 (sensitivity 1)."""

    name = "count"
    generic = True

    def share(self, facts):
        return 0.02

    def init(self, dim):
        return jnp.zeros((1,), jnp.int32)

    def block_sum(self, total, X, mask, n):
        return total + jnp.sum(jnp.asarray(mask) > 0).astype(jnp.int32)

    def release(self, total, n, key, sigma, noisy=None):
        if noisy is None:
            noisy = jnp.asarray(total, jnp.float64) + noise.gaussian(key, (1,), sigma, jnp.float64)
        return jnp.asarray(noisy, jnp.float32)

    def note(self, plan, sigma, value):
        return None if value is None else f"private row count {float(value[0]):.1f}"


COUNT = Count()
PARAMS = {"method": "sgd", "epsilon": 2.0, "steps": 10, "classes": [0, 1, 2]}


def _data(blobs, n=300):
    X, y = blobs(n, d=6, k=3, seed=3)
    return X + 2.0, y


def _independent_epsilon(plan):
    """ε of the plan's σ's composed by dp-accounting's PLD accountant directly (not privlin.accounting)."""
    acc = pld_privacy_accountant.PLDAccountant(relation(plan.neighbouring), value_discretization_interval=1e-4)
    for name, s in plan.noise_multipliers().items():
        if name != "step":
            acc.compose(ev.GaussianDpEvent(s))
    acc.compose(ev.GaussianDpEvent(plan.sigma), plan.steps)
    return acc.get_epsilon(plan.delta)


@pytest.mark.unit
def test_chain_order_events_and_derived_tables():
    plan = make_plan({"method": "sgd", "epsilon": 1.0, "recenter": True}, n=400, dim=8, n_classes=3)
    names = [r.name for r, _ in plan.chain]
    assert names == [n for n in releases.ORDER if n in names] and {"recenter", "center", "scale"} <= set(names)
    assert list(plan.noise_multipliers()) == names + ["step"]
    assert set(plan.secure_table()) == set(names) | {"step"}
    params = plan.ledger_params(seeded=False)
    assert all(params[f"sigma_{n}"] == plan.sigma_of(n) for n in names)
    assert all(params[f"sigma_{n}"] is None for n in releases.BUILT_IN if n not in names)
    # the re-centering rounds run as R Gaussians at σ·√R: they compose to one at σ (GDP: 1/σ² adds)
    rounds = plan.release("recenter").events(plan.sigma_recenter)
    assert len(rounds) == plan.recenter_rounds == 2
    assert sum(1 / s**2 for s in rounds) == pytest.approx(1 / plan.sigma_recenter**2, rel=1e-12)
    assert plan.epsilon == pytest.approx(_independent_epsilon(plan), rel=2e-3)
    static = plan.static()
    assert static.centered and static.release("center")[1] == 1.0 and hash(static) == hash(plan.static())


@pytest.mark.unit
def test_static_does_not_depend_on_epsilon():
    """One compiled program per (shapes, method, releases made): ε moves σ's, never the static part."""
    a = make_plan({"method": "sgd", "epsilon": 4.0, "scale": False, "learning_rate": 0.5}, n=5000, dim=8, n_classes=3)
    b = make_plan({"method": "sgd", "epsilon": 8.0, "scale": False, "learning_rate": 0.5}, n=5000, dim=8, n_classes=3)
    assert a.sigma != b.sigma and a.static() == b.static()
    # the defaults at an ε grid: the same releases made, so one program (σ ratios rounded as the program uses them)
    plans = [make_plan({"method": "sgd", "epsilon": e}, n=2000, dim=16, n_classes=3) for e in (4.0, 6.0, 8.0, 16.0)]
    assert len({p.sigma for p in plans}) == 4 and len({p.static() for p in plans}) == 1


def test_a_toy_release_appears_everywhere_and_streams_as_in_memory(monkeypatch, blobs, tmp_path):
    from privlin import DPLinearClassifier
    from privlin.ledger import PrivacyLedger

    X, y = _data(blobs)
    base = make_plan(PARAMS, n=len(y), dim=X.shape[1], n_classes=3)
    monkeypatch.setattr(releases, "ADDED", (COUNT,))
    plan = make_plan(PARAMS, n=len(y), dim=X.shape[1], n_classes=3)

    # the plan: its chain, event and ε (same target, so the steps get less of the budget)
    sigma_count = plan.sigma_of("count")
    assert math.isfinite(sigma_count) and not math.isfinite(base.sigma_of("count"))
    assert plan.sigma > base.sigma and plan.epsilon == pytest.approx(2.0, rel=1e-6)
    assert plan.epsilon == pytest.approx(_independent_epsilon(plan), rel=2e-3)
    assert plan.budget_shares()["count"] == pytest.approx(0.02, rel=1e-6)  # GDP, full batch: exact
    assert plan.secure_table()["count"] == (sigma_count, 1.0, float(len(y)))
    assert plan.static() != base.static()

    # the fit: report, ledger entry, released value; in memory and streamed
    led = PrivacyLedger(tmp_path / "ledger.json")
    fits = {}
    for path, extra in (("memory", {}), ("streamed", {"memory_limit": 1, "block_rows": 64})):
        est = DPLinearClassifier(**PARAMS, random_state=7, ledger=led, **extra).fit(X, y)
        fits[path] = est
        rep = est.privacy_
        assert rep.noise_multipliers["count"] == sigma_count and "private row count" in rep.notes
        assert est.plan_ == plan
    entries = led.entries
    assert len(entries) == 2 and all(e.params["sigma_count"] == sigma_count for e in entries)
    assert entries[0].epsilon == pytest.approx(plan.epsilon)
    mem, streamed = fits["memory"], fits["streamed"]
    np.testing.assert_array_equal(mem.extra_["count"], streamed.extra_["count"])
    assert abs(float(mem.extra_["count"][0]) - len(y)) < 6 * sigma_count
    np.testing.assert_allclose(mem.coef_transformed_, streamed.coef_transformed_, rtol=1e-5, atol=1e-6)

    # secure mode: the count is drawn on the host with the discrete Gaussian (no seed)
    sec = DPLinearClassifier(**PARAMS, secure_mode=True, memory_limit=1).fit(X, y)
    assert sec.privacy_.noise_multipliers["count"] == sigma_count
    assert abs(float(sec.extra_["count"][0]) - len(y)) < 6 * sigma_count
