"""The mechanism that runs is the mechanism accounted.

Calibration is checked against computations that do not use privlin's own
accounting code: the closed-form GDP privacy profile (Dong, Roth & Su 2019,
Cor. 2.13, written here with scipy) and dp-accounting's PLD accountant called
directly.
"""
import math

import numpy as np
import pytest
from dp_accounting import NeighboringRelation
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant
from closed_forms import gdp_delta as _gdp_delta

from privlin import accounting


def _pld_epsilon(sigma, q, steps, delta):
    acc = pld_privacy_accountant.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE)
    step = ev.GaussianDpEvent(sigma)
    if q < 1:
        step = ev.PoissonSampledDpEvent(q, step)
    acc.compose(ev.SelfComposedDpEvent(step, steps))
    return acc.get_epsilon(delta)


# The 100k-step PLD cases at tiny σ need ~18 GB: they are the slow tier (`pytest -m slow`); the default cases
# here take ~20 s and ~0.4 GB.

EPS = [0.01, 0.1, 1.0, 8.0, 100.0]
DELTAS = [1e-10, 1e-5, 1e-3]
STEPS = [1, 30, pytest.param(100_000, marks=pytest.mark.slow)]  # 100k steps: PLD at tiny σ needs ~18 GB, slow tier only


@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("delta", DELTAS)
def test_full_batch_calibration_never_overshoots(steps, delta):
    sigmas = []
    for eps in EPS:
        sigma = accounting.calibrate_noise(eps, delta, steps=steps)
        assert sigma > 0 and math.isfinite(sigma)
        mu = math.sqrt(steps) / sigma
        # the returned sigma meets the target exactly under the closed form ...
        assert _gdp_delta(mu, eps) <= delta * (1 + 1e-9)
        # ... and is not wastefully large (1 % more noise would overshoot the need)
        assert _gdp_delta(mu * 1.01, eps) > delta
        sigmas.append(sigma)
    # more epsilon, less noise
    assert all(a > b for a, b in zip(sigmas, sigmas[1:]))


@pytest.mark.parametrize("eps,delta,steps", [(1.0, 1e-5, 1), (8.0, 1e-5, 30), (0.1, 1e-10, 100), (20.0, 1e-5, 3)])
def test_full_batch_calibration_agrees_with_pld(eps, delta, steps):
    sigma = accounting.calibrate_noise(eps, delta, steps=steps)
    pld = _pld_epsilon(sigma, 1.0, steps, delta)
    # PLD discretization is pessimistic by ~1e-4 relative; beyond that they must agree
    assert pld == pytest.approx(eps, rel=2e-3)


@pytest.mark.parametrize(
    "eps,delta,steps,q",
    [(1.0, 1e-5, 10, 0.05), (0.5, 1e-6, 20, 0.3),
     pytest.param(8.0, 1e-5, 1000, 0.004, marks=pytest.mark.slow)],
)
def test_subsampled_calibration_never_overshoots_pld(eps, delta, steps, q):
    sigma = accounting.calibrate_noise(eps, delta, steps=steps, sample_rate=q, accountant="pld", rtol=1e-2)
    got = _pld_epsilon(sigma, q, steps, delta)
    assert got <= eps * (1 + 1e-6)
    assert got >= eps * 0.9  # within the search tolerance, not wasteful


def test_subsampled_calibration_at_extremes_does_not_crash():
    """Targets met by almost no noise (q below δ, huge ε) return a small σ that meets them, no MemoryError."""
    for eps, delta, steps, q in [(100.0, 1e-3, 1, 1e-5)]:
        sigma = accounting.calibrate_noise(eps, delta, steps=steps, sample_rate=q, accountant="pld", rtol=1e-2)
        assert 0 < sigma <= 1.0
        assert _pld_epsilon(sigma, q, steps, delta) <= eps


@pytest.mark.slow
@pytest.mark.parametrize("q", [1e-5, 1e-3, 0.1, 1.0])
@pytest.mark.parametrize("steps", [1, 1000, 100_000])
@pytest.mark.parametrize("eps,delta", [(0.01, 1e-10), (1.0, 1e-5), (100.0, 1e-3)])
def test_subsampled_calibration_grid(eps, delta, steps, q):
    """The whole grid of the issue: never overshoots, never crashes, never hangs."""
    acct = "pld" if q < 1 else "gdp"
    try:
        sigma = accounting.calibrate_noise(eps, delta, steps=steps, sample_rate=q, accountant=acct)
    except ValueError as exc:  # an impossible target must say so clearly
        assert "epsilon" in str(exc) or "noise" in str(exc)
        return
    assert sigma > 0
    assert _pld_epsilon(sigma, q, steps, delta) <= eps * (1 + 2e-3)


def test_epsilon_is_monotone_and_non_negative_in_sigma():
    sig = np.geomspace(0.3, 300, 25)
    full = [accounting.gdp_epsilon([s] * 10, 1e-5) for s in sig]
    sub = [accounting.dpsgd_epsilon(s, 0.01, 100, 1e-5) for s in sig[4::5]]
    for curve in (full, sub):
        assert all(e >= 0 for e in curve)
        assert all(a >= b for a, b in zip(curve, curve[1:]))
    assert full[-1] < 0.1


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(epsilon=0.0, delta=1e-5),
        dict(epsilon=-1.0, delta=1e-5),
        dict(epsilon=1.0, delta=0.0),
        dict(epsilon=1.0, delta=1.0),
        dict(epsilon=float("nan"), delta=1e-5),
        dict(epsilon=1.0, delta=1e-5, steps=0),
        dict(epsilon=1.0, delta=1e-5, sample_rate=0.0),
        dict(epsilon=1.0, delta=1e-5, sample_rate=1.5),
    ],
)
def test_impossible_targets_raise_clearly(kwargs):
    with pytest.raises(ValueError):
        accounting.calibrate_noise(**kwargs)


def test_infinite_epsilon_is_the_labelled_non_private_baseline():
    assert accounting.calibrate_noise(float("inf"), 1e-5, steps=10) == 0.0
    from privlin.plan import make_plan

    plan = make_plan({"epsilon": float("inf"), "method": "sgd", "steps": 10}, n=100, dim=4, n_classes=2)
    assert plan.sigma == 0.0 and plan.noise_multipliers()["center"] == 0.0 and not plan.private
