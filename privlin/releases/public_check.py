"""The public check: a paid test of whether a public source's statistics fit the private rows, before they are used.

Public statistics from another distribution can ruin a fit (a public centre far from the private rows puts every
model at chance), and privlin cannot see that from the public rows alone.  The check asks one counting query of the
private rows: how many lie within the public radius of the public centre (:class:`Reference`: the raw public rows'
mean, and the :data:`QUANTILE` quantile of their leave-one-out distances to it, so that a fraction ``QUANTILE`` of
fresh rows of the public distribution lie within it).  One row moves the count by at most 1 (a null row counts
0): sensitivity 1, released with Gaussian noise of std σ from :data:`CHECK_SHARE` of the plan's GDP budget μ², and
composed in the plan like every other release (:class:`PublicCheck` heads its chain).  The decision
(:func:`passes`) reads only the noisy count and public facts: the check passes where the noisy count is at least
N·``fraction`` − :data:`Z` sd, the sd of the count's noise and of a same-distribution count's own spread
(:func:`threshold`): a test, at a fixed level, of whether the private rows look drawn from the public rows'
distribution; where it fails, the fit runs the private defaults' plan on the budget the check left.

Why a share of μ² for both outcomes: with full-batch plans (the GDP accountant) both plans spend the same μ, so
the check followed by either is √(μ_check² + μ_rest²)-GDP whichever runs (GDP composes adaptively, Dong, Roth & Su
2019); the ledger charges the check with the larger of the two.  Poisson-sampled plans have no such common bound:
there the check is not made (:func:`applies`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Optional

import numpy as np

from .base import Release, planned_sigma

__all__ = ["Reference", "Outcome", "PublicCheck", "CHECK_SHARE", "QUANTILE", "Z", "NAME", "reference",
           "threshold", "passes", "applies", "check_sigma", "rest_epsilon"]

NAME = "public_check"
#: The check's share of the plan's GDP budget μ² (the rest goes to the plan that runs after it).
CHECK_SHARE = 0.005
#: The public radius: this quantile of the public rows' leave-one-out distances to their centre.
QUANTILE = 0.9
#: Standard deviations of the count (its noise and a same-distribution count's spread) below N·fraction that still
#: pass: a source of the private rows' distribution fails with probability about 0.1%.
Z = 3.0


class Reference(NamedTuple):
    """What the check compares the private rows against, from public rows only: ``center`` (d,) float64, the raw
    public rows' mean; ``radius`` the :data:`QUANTILE` quantile of their leave-one-out distances to it;
    ``fraction`` the share of public rows within it (by leave-one-out distance); ``m`` the public rows counted."""

    center: np.ndarray
    radius: float
    fraction: float
    m: int


class Outcome(NamedTuple):
    """The check's released value: ``count``, the noisy count of private rows within the public radius;
    ``threshold`` the count it had to reach (public); ``passed`` 1.0 where it did (the public statistics were
    used), 0.0 where not (the private defaults' plan ran)."""

    count: float
    threshold: float
    passed: float


def reference(blocks, quantile: float = QUANTILE) -> Reference:
    """The :class:`Reference` of public rows given as ``(X, mask)`` blocks (a callable returning a fresh iterator,
    read twice: the mean, then the distances).  Leave-one-out: the distance of row i to the mean of the other
    m − 1 rows is m/(m − 1) times its distance to the mean of all, so the public rows are measured as fresh rows
    would be."""
    total, m = None, 0
    for X, mask in blocks():
        X = np.asarray(X, np.float64)[np.asarray(mask) > 0]
        total = X.sum(axis=0) if total is None else total + X.sum(axis=0)
        m += X.shape[0]
    if m < 2:
        raise ValueError(f"the public check needs at least 2 public rows; got {m}")
    center = total / m
    dist = np.concatenate([np.linalg.norm(np.asarray(X, np.float64)[np.asarray(mask) > 0] - center, axis=1)
                           for X, mask in blocks()]) * (m / (m - 1))
    radius = float(np.quantile(dist, quantile, method="higher"))
    return Reference(center, radius, float(np.mean(dist <= radius)), m)


def count_within(blocks, ref: Reference) -> int:
    """The exact count of rows (``(X, mask)`` blocks, mask 0: a null row, never counted) within ``ref.radius`` of
    ``ref.center``: what the check releases with noise."""
    r2, count = ref.radius ** 2, 0
    for X, mask in blocks:
        d2 = np.sum((np.asarray(X, np.float64) - ref.center) ** 2, axis=1)
        count += int(np.sum((d2 <= r2) & (np.asarray(mask) > 0)))
    return count


def threshold(ref: Reference, n: int, sigma: float) -> float:
    """The noisy count the check must reach on N = ``n`` private rows with noise std ``sigma`` (public facts
    only): N·fraction − :data:`Z`·sd, sd² = σ² + N·f(1 − f) + N²·f(1 − f)/m, the noise and the
    spread of a same-distribution count (the private rows' own binomial spread, and the public quantile's)."""
    f = ref.fraction
    sd = math.sqrt(sigma ** 2 + n * f * (1 - f) + n * n * f * (1 - f) / ref.m)
    return n * f - Z * sd


def passes(noisy_count: float, ref: Reference, n: int, sigma: float) -> bool:
    """Whether the public statistics are used: a function of the noisy count and public facts only."""
    return bool(noisy_count >= threshold(ref, n, sigma))


def applies(params: dict) -> Optional[str]:
    """None where a fit of ``params`` takes the check; else why not (public facts: the setting)."""
    eps = params.get("epsilon")
    if eps is None:
        return "noise_multiplier given: no budget to take the check's share from"
    if math.isinf(eps):
        return "ε = ∞: nothing private to check"
    if params.get("method") == "minibatch":
        return ("Poisson-sampled steps: the two plans after it have no common privacy bound, so the check is not "
                "made")
    return None


def check_sigma(epsilon: float, delta: float, relation: str, share: float = CHECK_SHARE) -> float:
    """σ of the check's count: ``share`` of the GDP budget μ² of (ε, δ) (sensitivity 1; doubled under
    ``replace_one`` as privlin's accountant does for every release)."""
    from .. import accounting

    return planned_sigma(share, accounting.gdp_mu_for(float(epsilon), float(delta)), relation)


def rest_epsilon(epsilon: float, delta: float, share: float = CHECK_SHARE) -> float:
    """ε at ``delta`` of the budget the check leaves: μ_rest² = (1 − share)·μ²."""
    from .. import accounting

    mu = accounting.gdp_mu_for(float(epsilon), float(delta))
    return accounting.gdp_epsilon([1.0 / (math.sqrt(1.0 - share) * mu)], float(delta))


@dataclasses.dataclass(frozen=True)
class PublicCheck(Release):
    """The check as its plan's first release (σ, event, ledger key, note); its count is released before the plan
    runs (:func:`privlin.public_fallback.checked`), so the runner never computes it (:meth:`compute` refuses)."""

    name = NAME
    after = None

    def compute(self, driver, ctx, key, sigma):
        raise RuntimeError("the public check is released before its plan runs (privlin.public_fallback.checked), "
                           "never in the chain: a plan holding it is not run again")

    def share(self, facts):
        """0: made only with a public source (:mod:`privlin.public`)."""
        return 0.0

    def note(self, plan, sigma, value):
        if value is None:
            return None
        value = Outcome(*value)
        return (f"public check: noisy count {float(value.count):.1f} of {plan.n} private rows within the public "
                f"radius (σ = {sigma:.3g}; needed {float(value.threshold):.1f}): "
                + ("passed, the public statistics were used" if value.passed else
                   "failed, the private defaults' plan ran on the budget the check left"))


PUBLIC_CHECK = PublicCheck()
