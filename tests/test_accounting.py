"""privlin.accounting against independent computations: dp-accounting, the GDP closed form, the seeds' tables."""
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
import closed_forms

from privlin import accounting as A

pytestmark = pytest.mark.unit  # the pure pieces: run alone with `pytest -m unit`

ADD_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE


def pld_epsilon(event, delta, relation=ADD_REMOVE):
    # a coarser grid than privlin's (1e-4): independent, faster, still within 1e-4 relative here
    acc = pld_privacy_accountant.PLDAccountant(relation, value_discretization_interval=1e-3)
    acc.compose(event)
    return acc.get_epsilon(delta)


def test_gdp_mu_closed_form():
    assert A.gdp_mu([2.0, 2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert A.gdp_mu([3.0, 4.0]) == pytest.approx(math.sqrt(1 / 9 + 1 / 16))
    assert A.gdp_mu([3.0, math.inf]) == pytest.approx(1 / 3)
    assert A.gdp_mu([2.0], neighbouring="replace_one") == pytest.approx(1.0)


@pytest.mark.parametrize("mu,eps", [(0.3, 0.5), (1.0, 2.0), (2.5, 8.0)])
def test_gdp_delta_matches_textbook_formula(mu, eps):
    assert A.gdp_delta(mu, eps) == pytest.approx(closed_forms.gdp_delta(mu, eps), rel=1e-9)


@pytest.mark.parametrize("sigmas,delta", [([2.0], 1e-5), ([37.0] + [43.0] * 100, 1e-6),
                                          ([1.5, 2.0, 5.0], 1e-3)])
def test_gdp_epsilon_matches_dp_accounting_pld(sigmas, delta):
    event = ev.ComposedDpEvent([ev.GaussianDpEvent(s) for s in sigmas])
    ours = A.gdp_epsilon(sigmas, delta)
    assert ours == pytest.approx(pld_epsilon(event, delta), rel=1e-3)
    # and the exact curve says delta is met at ours
    assert A.gdp_delta(A.gdp_mu(sigmas), ours) <= delta * (1 + 1e-9)


@pytest.mark.parametrize("sigma,q,steps", [(2.0, 0.02, 500), (3.0, 0.18, 200), (2.0, 1.0, 5)])
def test_dpsgd_epsilon_matches_dp_accounting(sigma, q, steps):
    g = ev.GaussianDpEvent(sigma)
    event = ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, g) if q < 1 else g, steps)
    assert A.dpsgd_epsilon(sigma, q, steps, 1e-5) == pytest.approx(pld_epsilon(event, 1e-5), rel=1e-3)
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(event)
    assert A.dpsgd_epsilon(sigma, q, steps, 1e-5, accountant="rdp") == pytest.approx(rdp.get_epsilon(1e-5), rel=1e-6)


def test_full_batch_gdp_equals_pld_of_the_same_plan():
    assert A.dpsgd_epsilon(5.0, 1.0, 30, 1e-5, accountant="gdp") == pytest.approx(
        A.dpsgd_epsilon(5.0, 1.0, 30, 1e-5, accountant="pld"), rel=1e-3)


def test_substitution_doubles_sensitivity():
    # replace-one moves a clipped sum by 2C: sigma under substitution == sigma/2 under add/remove
    assert A.gdp_epsilon([4.0] * 3, 1e-5, "replace_one") == pytest.approx(A.gdp_epsilon([2.0] * 3, 1e-5), rel=1e-9)
    event = ev.SelfComposedDpEvent(ev.GaussianDpEvent(4.0), 3)
    pld_sub = pld_epsilon(event, 1e-5, dp_accounting.NeighboringRelation.REPLACE_ONE)
    assert A.gdp_epsilon([4.0] * 3, 1e-5, "replace_one") == pytest.approx(pld_sub, rel=1e-3)
    with pytest.raises(ValueError, match="replace_one"):
        A.dpsgd_epsilon(1.0, 0.1, 10, 1e-5, accountant="rdp", neighbouring="replace_one")


def test_dp_randp_imagenet_table23_lands_on_stated_epsilon():
    # seed 004, Table 23: full-batch, centering sigma_1 plus T DP-SGD steps with sigma_2; delta = 8e-7 (ImageNet)
    assert A.gdp_epsilon([71.0] + [43.0] * 100, 8e-7) == pytest.approx(1.0, abs=0.01)
    assert A.gdp_epsilon([14.0] + [9.33] * 200, 8e-7) == pytest.approx(8.0, abs=0.03)
    # the paper's one-mechanism equivalent sigma = 1/sqrt(1/s1^2 + T/s2^2) gives the same epsilon
    s = 1 / math.sqrt(1 / 71.0**2 + 100 / 43.0**2)
    assert A.gdp_epsilon([s], 8e-7) == pytest.approx(A.gdp_epsilon([71.0] + [43.0] * 100, 8e-7), rel=1e-9)


def test_dp_randp_cifar10_table22_sigmas_are_sufficient():
    # seed 004, Table 22: 100 full-batch steps, N=50000, delta=1e-5; sigmas were rounded up
    for eps, sigma in zip([0.1, 0.2, 0.5, 1, 2, 3, 4, 6, 8], [339, 171, 72, 38, 21, 14, 11, 8, 7]):
        got = A.gdp_epsilon([sigma] * 100, 1e-5)
        assert 0.8 * eps <= got <= eps


@pytest.mark.parametrize("accountant,q,steps,ratios", [("gdp", 1.0, 1, ()), ("gdp", 1.0, 100, (3.0,)),
                                                       ("rdp", 0.05, 100, ()),
                                                       ("pld", 0.2, 50, (4.0,))])
def test_calibrate_noise_is_smallest_and_never_overshoots(accountant, q, steps, ratios):
    target, delta = 1.0, 1e-5

    def eps(s):
        event = A.dp_event(s, steps=steps, sample_rate=q, extra_noise_multipliers=[r * s for r in ratios])
        return A.event_epsilon(event, delta, accountant=accountant)

    sigma = A.calibrate_noise(target, delta, steps=steps, sample_rate=q, accountant=accountant, extra_ratios=ratios)
    assert eps(sigma) <= target
    assert eps(sigma * (1 - 3e-3)) > target


def test_the_plans_noise_split_spends_the_share_of_mu_squared():
    """The one σ split (privlin.plan, full batch under GDP) against a direct GDP composition."""
    from privlin.plan import _calibrate

    sigma, sig = _calibrate(2.0, 1e-5, steps=100, q=1.0, shares={"center": 0.05}, accountant="gdp",
                            relation="replace_special")
    sigma_c = sig["center"]
    mu2 = A.gdp_mu([sigma_c] + [sigma] * 100) ** 2
    assert (1 / sigma_c**2) / mu2 == pytest.approx(0.05, rel=1e-9)
    assert A.gdp_epsilon([sigma_c] + [sigma] * 100, 1e-5) == pytest.approx(2.0, rel=1e-6)
    s0, none = _calibrate(2.0, 1e-5, steps=100, q=1.0, shares={}, accountant="gdp", relation="replace_special")
    assert none == {} and A.gdp_epsilon([s0] * 100, 1e-5) <= 2.0


def test_dp_event_structure():
    e = A.dp_event(2.0, steps=10, sample_rate=0.1, extra_noise_multipliers=[5.0])
    assert e == ev.ComposedDpEvent([ev.GaussianDpEvent(5.0),
                                    ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(2.0)), 10)])
    assert A.dp_event(2.0) == ev.GaussianDpEvent(2.0)


@pytest.mark.parametrize("call", [
    lambda: A.gdp_epsilon([1.0], 0.0), lambda: A.gdp_epsilon([1.0], 1.0), lambda: A.gdp_epsilon([-1.0], 1e-5),
    lambda: A.calibrate_noise(0.0, 1e-5), lambda: A.dpsgd_epsilon(1.0, 1.5, 10, 1e-5),
    lambda: A.dpsgd_epsilon(1.0, 0.5, 0, 1e-5), lambda: A.gdp_mu([1.0], neighbouring="bogus"),
    lambda: A.event_epsilon(A.dp_event(1.0, sample_rate=0.1), 1e-5, accountant="gdp"),
])
def test_bad_input_is_a_clear_value_error(call):
    with pytest.raises(ValueError):
        call()



# ----------------------------------------------------------------------------- memoization

CALIBRATIONS = [  # (epsilon, delta, keyword arguments): minibatch (PLD, RDP, replace_one) and full batch (GDP)
    (0.5, 1e-5, dict(steps=5, sample_rate=0.1, accountant="pld", extra_ratios=[3.0])),
    (0.5, 1e-5, dict(steps=10, sample_rate=0.05, accountant="rdp")),
    (0.5, 1e-6, dict(steps=5, sample_rate=0.1, accountant="pld", neighbouring="replace_one")),
    (1.0, 1e-5, dict(steps=100, extra_ratios=[3.0])),
    (2.0, 1e-5, dict(steps=10, neighbouring="replace_one")),
]


@pytest.mark.parametrize("epsilon,delta,kw", CALIBRATIONS)
def test_calibrate_noise_cache_returns_the_uncached_float(epsilon, delta, kw):
    fresh = A.calibrate_noise.uncached(epsilon, delta, **kw)
    A.calibrate_noise.cache_clear()
    A.event_epsilon.cache_clear()
    first = A.calibrate_noise(epsilon, delta, **kw)  # a miss: computed
    info = A.calibrate_noise.cache_info()
    assert (info.hits, info.misses) == (0, 1)
    again = A.calibrate_noise(epsilon, delta, **{**kw, "extra_ratios": tuple(kw.get("extra_ratios", ()))})
    assert A.calibrate_noise.cache_info().hits == 1  # a list and a tuple of the same ratios: one entry
    assert fresh.hex() == first.hex() == again.hex()
    # the σ meets the target; with dp-accounting the plan's event was the calibration's last check: a cache hit
    acct = kw.get("accountant", "gdp")
    event = A.dp_event(again, steps=kw["steps"], sample_rate=kw.get("sample_rate", 1.0),
                       extra_noise_multipliers=[r * again for r in kw.get("extra_ratios", ())])
    hits = A.event_epsilon.cache_info().hits
    assert A.event_epsilon(event, delta, accountant=acct, neighbouring=kw.get("neighbouring", "replace_special")) <= epsilon
    assert A.event_epsilon.cache_info().hits == hits + (acct != "gdp")


def test_calibrate_noise_cache_keys_are_exact():
    A.calibrate_noise.cache_clear()
    base = A.calibrate_noise(1.0, 1e-5, steps=10)
    assert A.calibrate_noise(1, 1e-5, steps=10) == base  # int ε: its own entry (same value here)
    assert A.calibrate_noise(1.0, 1e-5, steps=10, neighbouring=A.relation("replace_special")) == base  # enum == name
    assert A.calibrate_noise.cache_info().hits == 1 and A.calibrate_noise.cache_info().misses == 2
    assert A.calibrate_noise(1.0, 1e-5, steps=11) > base  # another plan, another σ
    assert A.calibrate_noise(1.0, 2e-5, steps=10) < base
    assert A.calibrate_noise(1.0, 1e-5, steps=10, neighbouring="replace_one") == pytest.approx(2 * base, rel=1e-9)
    assert A.calibrate_noise(1.0, 1e-5, steps=10, extra_ratios=iter([3.0])) > base  # an iterator is read once
    assert A.calibrate_noise.cache_info().hits == 1
    with pytest.raises(ValueError):  # errors are raised each time, never cached
        A.calibrate_noise(1.0, 1e-5, neighbouring="bogus")
    with pytest.raises(ValueError):
        A.calibrate_noise(1.0, 1e-5, neighbouring="bogus")


def test_event_epsilon_cache_matches_dp_accounting_directly():
    A.event_epsilon.cache_clear()
    sigma, q, steps, delta = 3.0, 0.1, 3, 1e-5

    def event(steps=steps):  # a new object each time: the cache keys on what it describes
        return ev.ComposedDpEvent([ev.GaussianDpEvent(6.0),
                                   ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(sigma)), steps)])

    cached = A.event_epsilon(event(), delta)
    assert A.event_epsilon(event(), delta) == cached and A.event_epsilon.cache_info().hits == 1
    assert A.event_epsilon.uncached(event(), delta).hex() == cached.hex()
    acc = pld_privacy_accountant.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_SPECIAL,
                                               value_discretization_interval=1e-4)  # privlin's grid
    acc.compose(event())
    assert acc.get_epsilon(delta) == cached
    # another number anywhere in the event, another relation or accountant: another entry
    assert A.event_epsilon(event(steps + 1), delta) > cached
    assert A.event_epsilon(event(), delta, accountant="rdp") != cached
    assert A.event_epsilon(event(), delta, neighbouring="replace_one") > cached
    assert A.event_epsilon.cache_info().hits == 1


@pytest.mark.parametrize("accountant,kw", [("gdp", {"steps": 10}), ("pld", {"steps": 10, "sample_rate": 0.1})])
def test_a_numpy_float32_target_calibrates_as_its_float_value(accountant, kw):
    """ε given as np.float32 (e.g. read from an array) gets the σ of the same value as a Python float, and meets it
    under dp-accounting's PLD accountant directly (it once crept toward it in 1e-12 steps, ~92 000 of them)."""
    from dp_accounting import NeighboringRelation

    target = np.float32(0.3)
    sigma = A.calibrate_noise(target, 1e-5, accountant=accountant, **kw)
    assert sigma == A.calibrate_noise(float(target), 1e-5, accountant=accountant, **kw)
    acc = pld_privacy_accountant.PLDAccountant(NeighboringRelation.REPLACE_SPECIAL, value_discretization_interval=1e-4)
    step = ev.GaussianDpEvent(sigma)
    if kw.get("sample_rate", 1.0) < 1:
        step = ev.PoissonSampledDpEvent(kw["sample_rate"], step)
    acc.compose(ev.SelfComposedDpEvent(step, kw["steps"]))
    assert acc.get_epsilon(1e-5) <= float(target) * (1 + 2e-3)
