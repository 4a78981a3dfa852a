"""privlin.plan: every default and σ of a fit, decided from public facts, checked against independent math."""
import math

import numpy as np
import pytest
from closed_forms import gdp_delta
from closed_forms import gdp_mu as _gdp_mu
from dp_accounting import NeighboringRelation
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant

from privlin.plan import DEFAULT_STEPS, make_plan

pytestmark = pytest.mark.unit  # pure: plans from public facts, no fit


def test_full_batch_sigma_split_is_the_gdp_closed_form():
    """sgd, T=100, 3% of μ² on the row norm, 5% on centering, 15% on scaling (7.5% moments, 7.5% whitening):
    σ = √(T/((1-s)μ²)), σ_r = 1/(√s_r μ) for each one-off release r."""
    p = make_plan({"epsilon": 2.0, "delta": 1e-5}, n=1000, dim=8, n_classes=3)
    mu = _gdp_mu(2.0, 1e-5)
    assert (p.method, p.steps, p.sample_rate, p.accountant) == ("sgd", 100, 1.0, "gdp")
    assert p.sigma == pytest.approx(math.sqrt(100 / (0.77 * mu**2)), rel=1e-6)
    assert p.sigma_radius == pytest.approx(1 / (math.sqrt(0.03) * mu), rel=1e-6)
    assert p.sigma_center == pytest.approx(1 / (math.sqrt(0.05) * mu), rel=1e-6)
    assert p.sigma_scale == pytest.approx(1 / (math.sqrt(0.075) * mu), rel=1e-6)
    assert p.sigma_whiten == pytest.approx(1 / (math.sqrt(0.075) * mu), rel=1e-6)
    assert (p.center_share, p.scale_share) == (pytest.approx(0.05, rel=1e-9), pytest.approx(0.15, rel=1e-9))
    assert p.epsilon <= 2.0 and p.epsilon == pytest.approx(2.0, rel=1e-6)


def test_defaults_per_method():
    sgd = make_plan({"epsilon": 1.0}, n=5000, dim=4, n_classes=10)
    adam1 = make_plan({"epsilon": 1.0, "method": "adam1"}, n=5000, dim=4, n_classes=10)
    mb = make_plan({"epsilon": 1.0, "method": "minibatch", "batch_size": 500}, n=5000, dim=4, n_classes=10)
    assert (sgd.steps, adam1.steps, mb.steps) == (DEFAULT_STEPS["sgd"], 1, DEFAULT_STEPS["minibatch"])
    assert (sgd.loss, sgd.bias_init, sgd.optimizer, sgd.fit_intercept) == ("softmax", 0.0, "sgd", True)
    assert (adam1.loss, adam1.bias_init, adam1.optimizer, adam1.learning_rate) == ("sigmoid", -10.0, "adam", 1e-3)
    assert not adam1.fit_intercept and not adam1.scaled  # Mehta et al.'s recipe: frozen bias -10, one data pass
    assert sgd.learning_rate == pytest.approx(0.008 * 5000 / sgd.sigma)  # DP-RandP Table 22 at its T=100
    assert mb.sample_rate == 0.1 and mb.accountant == "pld"
    # the same noise per logit after T=200 steps: lr·σ·√T/((1−β)·B) = 0.8, with B = q·N
    assert mb.learning_rate == pytest.approx(0.8 * 0.1 * 500 / (mb.sigma * math.sqrt(200)))
    assert sgd.neighbouring == "replace_special"


@pytest.mark.heavy
def test_subsampled_plan_meets_its_target_under_dp_accounting():
    p = make_plan({"epsilon": 3.0, "method": "minibatch", "batch_size": 64, "steps": 50}, n=2000, dim=4, n_classes=2)
    assert p.scaled and p.whitened and p.radial  # every release is in the event checked below
    acc = pld_privacy_accountant.PLDAccountant(NeighboringRelation.REPLACE_SPECIAL)
    acc.compose(ev.ComposedDpEvent([ev.GaussianDpEvent(p.sigma_radius), ev.GaussianDpEvent(p.sigma_center), ev.GaussianDpEvent(p.sigma_scale),
                                    ev.GaussianDpEvent(p.sigma_whiten),
                                    ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.032, ev.GaussianDpEvent(p.sigma)),
                                                           50)]))
    assert acc.get_epsilon(1e-5) <= 3.0 * (1 + 2e-3)
    assert acc.get_epsilon(1e-5) >= 2.9  # calibrated, not merely safe


def test_given_sigma_reports_the_epsilon_it_achieves():
    """A paper's σ (DP-RandP Table 22, ε=1: σ=38, T=100, no centering) gives ε by the GDP closed form."""
    p = make_plan({"epsilon": None, "noise_multiplier": 38.0, "center": False}, n=50000, dim=8, n_classes=10)
    mu = math.sqrt(100) / 38.0
    assert gdp_delta(mu, p.epsilon) == pytest.approx(1e-5, rel=1e-4)
    assert 0.9 < p.epsilon < 1.1 and not p.centered


def test_substitution_doubles_the_sensitivity():
    rep = make_plan({"epsilon": 2.0, "neighbouring": "replace_one", "center": False}, n=100, dim=2, n_classes=2)
    zero = make_plan({"epsilon": 2.0, "center": False}, n=100, dim=2, n_classes=2)
    assert rep.sigma == pytest.approx(2 * zero.sigma, rel=1e-9)


def test_non_private_baseline_and_unknown_class_count():
    p = make_plan({"epsilon": math.inf}, n=100, dim=2, n_classes=2)
    assert (p.sigma, p.accountant, p.private) == (0.0, "none", False)
    assert isinstance(p.dp_event(), ev.NonPrivateDpEvent)
    # the class count is not needed to decide (and charge) the noise
    assert make_plan({}, n=100, dim=2, n_classes=None).dp_event() == make_plan({}, n=100, dim=2, n_classes=7).dp_event()


@pytest.mark.parametrize("params,match", [
    ({"method": "adam1", "steps": 3}, "single step"),
    ({"epsilon": 1.0, "noise_multiplier": 2.0}, "not both"),
    ({"epsilon": None}, "noise_multiplier"),
    ({"normalize": False}, "centering needs normalize"),
    ({"neighbouring": "add_or_remove_one"}, "publish N"),
    ({"method": "minibatch", "accountant": "gdp", "batch_size": 10}, "exact only for full-batch"),
    ({"epsilon": None, "noise_multiplier": 3.0}, "center_noise_multiplier"),
])
def test_impossible_plans_are_clear_errors(params, match):
    with pytest.raises(ValueError, match=match):
        make_plan(params, n=100, dim=2, n_classes=2)
    with pytest.raises(ValueError, match="2 classes"):
        make_plan({}, n=100, dim=2, n_classes=1)


def test_more_rows_than_an_exact_sum_holds_are_refused_by_the_plan():
    """N ≤ 2³⁰ is what keeps every released sum exact (sensitivity's grids); checked from the public N, before any
    charge."""
    from privlin import sensitivity

    make_plan({"epsilon": 1.0, "delta": 1e-9}, n=sensitivity.MAX_ROWS, dim=8, n_classes=2)
    with pytest.raises(ValueError, match="exact sums"):
        make_plan({"epsilon": 1.0, "delta": 1e-9}, n=sensitivity.MAX_ROWS + 1, dim=8, n_classes=2)


@pytest.mark.heavy
def test_two_stage_centering_is_charged_as_it_runs_and_composes_to_one_release():
    """Where the centering runs in two stages (preprocess.center_stages), the event holds two Gaussians at σ_c·√2,
    and dp-accounting's PLD of that event equals its PLD with the one Gaussian at σ_c they compose to (Gaussian
    mechanisms compose exactly: μ² = Σ 1/σ²); the GDP plan meets its ε with the stages in its event."""
    for acct in ("gdp", "pld"):
        p = make_plan({"epsilon": 2.0, "delta": 1e-5, "accountant": acct}, n=1000, dim=8, n_classes=3)
        assert p.center_stages == 2
        events = p.dp_event().events
        stages = [i for i, e in enumerate(events) if e == ev.GaussianDpEvent(p.sigma_center * math.sqrt(2))]
        assert len(stages) == 2
        assert p.epsilon == pytest.approx(2.0, rel=1e-3)
    one = ev.ComposedDpEvent([ev.GaussianDpEvent(p.sigma_center) if i == stages[0] else e
                              for i, e in enumerate(events) if i != stages[1]])

    def pld_eps(event):
        acc = pld_privacy_accountant.PLDAccountant(NeighboringRelation.REPLACE_SPECIAL, value_discretization_interval=1e-4)
        return acc.compose(event).get_epsilon(1e-5)

    assert pld_eps(p.dp_event()) == pytest.approx(pld_eps(one), rel=2e-3)
    # secure mode draws each release on the host from one table (Plan.secure_table): one stage there
    assert make_plan({"epsilon": 2.0, "delta": 1e-5, "secure_mode": True}, n=1000, dim=8, n_classes=3).center_stages == 1


def test_recentering_rounds_are_made_where_the_centering_is_coarse_and_charged_as_they_run():
    """N=200, d=8 at ε=1 (the centering's error ≈ 0.24 of the row norm): two rounds, 5% of μ² (σ_r = 1/(√0.05·μ),
    the closed form), two Gaussians at σ_r·√2 in the event, whose PLD equals the one at σ_r; the whole GDP plan
    checked against dp-accounting's PLD of the Gaussians it lists (independently written here)."""
    p = make_plan({"epsilon": 1.0, "delta": 1e-5}, n=200, dim=8, n_classes=2)
    mu = _gdp_mu(1.0, 1e-5)
    assert (p.recenter_rounds, p.recentered) == (2, True)
    assert p.sigma_recenter == pytest.approx(1 / (math.sqrt(0.05) * mu), rel=1e-6)
    assert p.budget_shares()["recenter"] == pytest.approx(0.05, rel=1e-9)
    events = p.dp_event().events
    rounds = [i for i, e in enumerate(events) if e == ev.GaussianDpEvent(p.sigma_recenter * math.sqrt(2))]
    assert p.sigma_recenter == p.sigma_center and p.center_stages == 2  # equal shares: four events at σ_r·√2
    assert len(rounds) == 4

    def pld_eps(event):
        acc = pld_privacy_accountant.PLDAccountant(NeighboringRelation.REPLACE_SPECIAL,
                                                   value_discretization_interval=1e-4)
        return acc.compose(event).get_epsilon(1e-5)

    one = ev.ComposedDpEvent([ev.GaussianDpEvent(p.sigma_recenter) if i == rounds[0] else e
                              for i, e in enumerate(events) if i != rounds[1]])
    assert pld_eps(p.dp_event()) == pytest.approx(pld_eps(one), rel=2e-3)
    listed = [ev.GaussianDpEvent(s) for name, s in p.noise_multipliers().items() if name != "step"]
    listed.append(ev.SelfComposedDpEvent(ev.GaussianDpEvent(p.sigma), p.steps))
    assert pld_eps(ev.ComposedDpEvent(listed)) <= 1.0 * (1 + 2e-3)
    assert p.epsilon <= 1.0 and p.epsilon == pytest.approx(1.0, rel=1e-6)


def test_recentering_rounds_are_not_made_where_they_cannot_pay_or_are_refused():
    base = {"epsilon": 1.0, "delta": 1e-5}
    assert make_plan({**base, "epsilon": 8.0}, n=200, dim=8, n_classes=2).recenter_rounds == 0  # e ≈ 0.04
    assert make_plan(base, n=200_000, dim=128, n_classes=10).recenter_rounds == 0               # large N
    assert make_plan({**base, "secure_mode": True}, n=200, dim=8, n_classes=2).recenter_rounds == 0
    assert make_plan({**base, "method": "adam1"}, n=200, dim=8, n_classes=2).recenter_rounds == 0  # one pass
    assert make_plan({**base, "recenter": False}, n=200, dim=8, n_classes=2).recenter_rounds == 0
    assert make_plan({**base, "epsilon": 8.0, "recenter": True}, n=200, dim=8, n_classes=2).recenter_rounds == 2
    with pytest.raises(ValueError, match="recenter=True"):
        make_plan({"epsilon": None, "noise_multiplier": 2.0, "center_noise_multiplier": 5.0, "recenter": True},
                  n=200, dim=8, n_classes=2)
    with pytest.raises(ValueError, match="recenter=True"):
        make_plan({**base, "recenter": True, "secure_mode": True}, n=200, dim=8, n_classes=2)


def test_the_estimators_signature_is_the_one_table_of_defaults():
    from privlin import DPLinearClassifier
    from privlin.defaults import PARAMS

    assert DPLinearClassifier().get_params() == dict(PARAMS)
