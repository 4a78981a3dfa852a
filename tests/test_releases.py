"""Releases as values: the chain a plan holds, what it derives, and releases added from outside.

The toy releases below are defined here, not in privlin: adding one is one class and one entry in the registry
(``privlin.releases.REGISTRY``, :func:`privlin.releases.register`).  A private row count reads the rows as given; a
private count of the rows on one side of the first axis once centered reads the rows as the centering left them (it runs
right after it, through the same driver calls as the built-in releases).  Each must then appear, with no other change to
privlin, in the plan's event and ε, the report, the ledger entry and the secure-mode table, and run the same streamed as
in memory.
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
from privlin.releases.norms import RADIAL_CLIP
from privlin.releases import Release
from privlin.releases.base import release_key


@dataclasses.dataclass(frozen=True)
class Count(Release):
    """The number of non-null rows, with Gaussian noise: one row moves it by 1 (sensitivity 1)."""

    name = "count"

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


def _positive_side(total, Z, mask):
    """``total`` + how many rows of a chunk have a positive first coordinate (rows as the earlier releases left
    them: the driver maps them)."""
    return total + jnp.sum((Z[:, 0] > 0) & (jnp.asarray(mask) > 0)).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Side(Release):
    """The number of centered rows on the positive side of the first axis, with Gaussian noise (a count:
    sensitivity 1).  It reads the rows through the context's row map, so it runs after the centering."""

    name = "side"
    after = "center"

    def share(self, facts):
        return 0.02

    def compute(self, driver, ctx, key, sigma):
        rows = driver.mapped(ctx.row_map(), ctx.clip, ctx.normalize)  # as the centering left them
        total = rows.total(self.name, jnp.zeros((1,), jnp.int32), _positive_side)
        noisy = driver.noisy(self.name, total)
        if noisy is None:
            noisy = jnp.asarray(total, jnp.float64) + noise.gaussian(release_key(key, self.name), (1,), sigma,
                                                                     jnp.float64)
        return jnp.asarray(noisy, jnp.float32)

    def note(self, plan, sigma, value):
        return None if value is None else f"centered rows on the positive side {float(value[0]):.1f}"


SIDE = Side()
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
    # the reference release's own ratio, 1, as the compiled fit gets it: rounded up to float32 (more noise)
    ratio = static.release("center")[1]
    assert static.centered and 1.0 < ratio <= 1.0 + 2**-21 and hash(static) == hash(plan.static())


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
    monkeypatch.setattr(releases, "REGISTRY", (*releases.REGISTRY, COUNT, SIDE))
    plan = make_plan(PARAMS, n=len(y), dim=X.shape[1], n_classes=3)

    # the plan: its chain (the side count right after the centering), event and ε (same target, so the steps get
    # less of the budget)
    names = [r.name for r, _ in plan.chain]
    assert names == ["radius", "count", "center", "side", "scale", "whiten"]
    assert names[:1] + names[2:3] + names[4:] == [r.name for r, _ in base.chain]
    sigma_count, sigma_side = plan.sigma_of("count"), plan.sigma_of("side")
    assert math.isfinite(sigma_count) and not math.isfinite(base.sigma_of("count"))
    assert plan.sigma > base.sigma and plan.epsilon == pytest.approx(2.0, rel=1e-6)
    assert plan.epsilon == pytest.approx(_independent_epsilon(plan), rel=2e-3)
    for name in ("count", "side"):
        assert plan.budget_shares()[name] == pytest.approx(0.02, rel=1e-6)  # GDP, full batch: exact
        assert plan.secure_table()[name] == (plan.sigma_of(name), 1.0, float(len(y)))
    assert plan.static() != base.static()

    # the fit: report, ledger entry, released value; in memory and streamed
    led = PrivacyLedger(tmp_path / "ledger.json")
    fits = {}
    for path, extra in (("memory", {}), ("streamed", {"memory_limit": 1, "block_rows": 64})):
        est = DPLinearClassifier(**PARAMS, random_state=7, ledger=led, **extra).fit(X, y)
        fits[path] = est
        rep = est.privacy_
        assert rep.noise_multipliers["count"] == sigma_count and "private row count" in rep.notes
        assert rep.noise_multipliers["side"] == sigma_side and "centered rows on the positive side" in rep.notes
        assert est.plan_ == plan
    entries = led.entries
    assert len(entries) == 2 and all(e.params["sigma_count"] == sigma_count for e in entries)
    assert all(e.params["sigma_side"] == sigma_side for e in entries)
    assert entries[0].epsilon == pytest.approx(plan.epsilon)
    mem, streamed = fits["memory"], fits["streamed"]
    for name in ("count", "side"):
        np.testing.assert_array_equal(mem.extra_[name], streamed.extra_[name])
    assert abs(float(mem.extra_["count"][0]) - len(y)) < 6 * sigma_count
    np.testing.assert_allclose(mem.coef_transformed_, streamed.coef_transformed_, rtol=1e-5, atol=1e-6)

    # secure mode: the count is drawn on the host with the discrete Gaussian (no seed)
    sec = DPLinearClassifier(**PARAMS, secure_mode=True, memory_limit=1).fit(X, y)
    assert sec.privacy_.noise_multipliers["count"] == sigma_count
    assert abs(float(sec.extra_["count"][0]) - len(y)) < 6 * sigma_count
    assert "side" in sec.extra_ and sec.privacy_.noise_multipliers["side"] == sec.plan_.sigma_of("side")


def test_a_toy_release_reads_the_rows_as_the_centering_left_them(monkeypatch, blobs):
    """Without noise (ε = ∞) the side count is exact: numpy's count of the rows, given their radial coordinate
    and centered by the released mean, with a positive first coordinate; in memory and streamed alike.  Before
    centering most rows are on the positive side (the data's offset), so a count of the rows as given would fail."""
    from privlin import DPLinearClassifier

    X, y = _data(blobs)
    monkeypatch.setattr(releases, "REGISTRY", (*releases.REGISTRY, SIDE))
    params = {**PARAMS, "epsilon": math.inf}
    got = {}
    for path, extra in (("memory", {}), ("streamed", {"memory_limit": 1, "block_rows": 64})):
        with pytest.warns(Warning, match="NON-PRIVATE"):
            est = DPLinearClassifier(**params, random_state=0, **extra).fit(X, y)
        assert [r.name for r, _ in est.plan_.chain][:3] == ["radius", "center", "side"] and est.plan_.sigma_of("side") == 0
        got[path] = float(est.extra_["side"][0])
    norms = np.linalg.norm(X.astype(np.float64), axis=1)
    r = np.clip(np.log(norms / 2.0 ** float(est.radius_)), -RADIAL_CLIP, RADIAL_CLIP)
    first = X[:, 0] / norms / np.sqrt(1.0 + r * r) * est.plan_.clip - np.asarray(est.mean_, np.float64)[0]
    near = int((abs(first) < 1e-4).sum())  # rows within float32 rounding of the side may fall either way
    assert got["memory"] == got["streamed"] and abs(got["memory"] - (first > 0).sum()) <= near <= 2
    assert abs((first > 0).sum() - (X[:, 0] > 0).sum()) > 20  # the rows as given would give another count
