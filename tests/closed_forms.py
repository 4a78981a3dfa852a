"""Closed forms of Gaussian DP (Dong, Roth & Su), written with scipy alone: the independent computation the privacy
tests compare privlin against, so nothing here may import privlin.

Full-batch Gaussians of noise multipliers σᵢ compose to μ-GDP with μ = √Σσᵢ⁻², and μ-GDP is (ε, δ)-DP for
δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2); ε from μ and μ from ε are this equation solved by root finding.
"""
import math

import numpy as np
from dp_accounting import dp_event as ev
from scipy import optimize
from scipy.stats import norm

_TOL = dict(xtol=1e-14, rtol=4 * np.finfo(float).eps)


def gdp_delta(mu: float, eps: float) -> float:
    """δ(ε) of μ-GDP."""
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def mu_of(sigmas) -> float:
    """μ of full-batch Gaussians of noise multipliers ``sigmas`` composed (an infinite σ adds nothing)."""
    return math.sqrt(sum(1.0 / s**2 for s in sigmas))


def gdp_epsilon(mu: float, delta: float) -> float:
    """The ε at which μ-GDP has δ(ε) = ``delta``."""
    return optimize.brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, 200.0, **_TOL)


def gdp_mu(eps: float, delta: float) -> float:
    """The μ at which μ-GDP has δ(``eps``) = ``delta``."""
    return optimize.brentq(lambda mu: gdp_delta(mu, eps) - delta, 1e-6, 100.0, **_TOL)


def gaussians(event) -> list[float]:
    """Every Gaussian σ of a full-batch dp-accounting event tree, repeated as often as it is composed."""
    if isinstance(event, ev.GaussianDpEvent):
        return [event.noise_multiplier]
    if isinstance(event, ev.SelfComposedDpEvent):
        return gaussians(event.event) * event.count
    if isinstance(event, ev.ComposedDpEvent):
        return [s for e in event.events for s in gaussians(e)]
    raise AssertionError(f"not a full-batch Gaussian event: {event}")
