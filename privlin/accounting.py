"""Privacy accounting: the one place privacy numbers are computed.

Every privlin mechanism is a Gaussian mechanism on a sum of per-example
contributions whose L2 norm is bounded by a public constant (the clip norm C),
with noise of standard deviation ``sigma * C``; ``sigma`` is its *noise
multiplier*.

* Full-batch mechanisms (private centering, one full-batch gradient step)
  compose exactly under Gaussian differential privacy (Dong, Roth & Su, 2019,
  Cor. 3.3): T mechanisms with multipliers σ_i are together μ-GDP with
  μ = sqrt(Σ 1/σ_i²), and μ-GDP converts to (ε, δ) exactly (Thm. 2.7).  This
  is the accounting of DP-RandP (seed 004, App. G).
* Poisson-subsampled steps go through dp-accounting's PLD (default) or RDP
  accountant.

Neighbouring relations (dp-accounting's names, stated in every report and ledger entry):

``"replace_special"`` (default; "zero-out")
    Datasets differ by replacing one example with a null example that contributes nothing to any released
    sum.  The dataset size N is the same on both sides, so publishing it (privlin normalizes by it and
    reports it) costs nothing.  One example moves a clipped sum by at most C.  dp-accounting gives the same
    numbers as for add/remove-one.
``"replace_one"``
    Datasets differ by replacing one example with another.  A clipped sum moves by at most 2C, so a
    full-batch mechanism with multiplier σ is accounted as σ/2; subsampled steps use dp-accounting's
    REPLACE_ONE PLD.
``"add_or_remove_one"``
    Datasets differ by one example.  Kept for events made elsewhere (a ledger may hold them); privlin's
    trainers publish N exactly, which tells D from D ∪ {x}, so they refuse it.
"""
from __future__ import annotations

import functools
import math
from typing import Iterable, Sequence

import attr
import dp_accounting
import numpy as np
from dp_accounting import dp_event as _ev
from dp_accounting.pld import pld_privacy_accountant as _pld
from dp_accounting.rdp import rdp_privacy_accountant as _rdp
from scipy import optimize, special

__all__ = [
    "NEIGHBOURING", "DEFAULT_NEIGHBOURING", "ACCOUNTANTS", "RELATION_NAMES", "relation_name", "relation_label",
    "relation", "make_accountant",
    "compose_epsilon", "gdp_mu", "gdp_delta", "gdp_epsilon", "gdp_mu_for", "dp_event",
    "event_epsilon", "dpsgd_epsilon", "calibrate_noise",
]

#: dp-accounting's neighbouring relations by their lower-case enum names: the one vocabulary of privlin.
NEIGHBOURING = {r.name.lower(): r for r in dp_accounting.NeighboringRelation}
#: The relation privlin's trainers satisfy while publishing N (see the module docstring).
DEFAULT_NEIGHBOURING = "replace_special"
ACCOUNTANTS = ("gdp", "pld", "rdp")

# PLD discretization: fine enough that PLD agrees with the exact GDP curve to ~1e-4 relative.
_PLD_INTERVAL = 1e-4
# Smallest σ the subsampled calibration evaluates with dp-accounting (PLD memory grows like 1/σ²).
_SIGMA_FLOOR = 0.5
# Results of event_epsilon and calibrate_noise kept per process (a PLD check or calibration of a subsampled plan
# costs 0.1-3 s, and the same public plan is accounted again by every fit, sweep and report that uses it).
_CACHE_SIZE = 256


def relation_name(neighbouring) -> str:
    """The canonical name (``"replace_special"``, ``"replace_one"``, ``"add_or_remove_one"``) of a relation."""
    if isinstance(neighbouring, dp_accounting.NeighboringRelation):
        return neighbouring.name.lower()
    if neighbouring not in NEIGHBOURING:
        raise ValueError(f"neighbouring must be one of {sorted(NEIGHBOURING)} (dp-accounting's relations), "
                         f"got {neighbouring!r}")
    return neighbouring


#: The name users read for each relation (README, PRIVACY.md): what every report, ledger summary and error prints,
#: with dp-accounting's name beside it (:func:`relation_label`).
RELATION_NAMES = {"replace_special": "zero-out", "replace_one": "substitution", "add_or_remove_one": "add/remove"}


def relation_label(neighbouring: str) -> str:
    """``"zero-out (dp-accounting: replace_special)"``: the relation as users read it, then as dp-accounting names it
    (the name ``neighbouring=`` takes and records keep)."""
    return f"{RELATION_NAMES.get(neighbouring, neighbouring)} (dp-accounting: {neighbouring})"


def relation(neighbouring) -> dp_accounting.NeighboringRelation:
    """dp-accounting's enum for a relation name."""
    return NEIGHBOURING[relation_name(neighbouring)]


def sensitivity_factor(neighbouring) -> float:
    """How far one neighbour moves a sum of contributions bounded by C, in units of C."""
    return 2.0 if relation_name(neighbouring) == "replace_one" else 1.0


def make_accountant(accountant: str, neighbouring, *, pld_interval: float = _PLD_INTERVAL):
    """A fresh dp-accounting accountant: the only place privlin builds one."""
    rel = relation(neighbouring)
    if accountant == "pld":
        return _pld.PLDAccountant(rel, value_discretization_interval=pld_interval)
    if accountant == "rdp":
        if rel == dp_accounting.NeighboringRelation.REPLACE_ONE:
            raise ValueError("dp-accounting's RDP accountant does not support neighbouring='replace_one'; use 'pld'")
        return _rdp.RdpAccountant(neighboring_relation=rel)
    raise ValueError(f"accountant must be 'pld' or 'rdp' here, got {accountant!r}")


def compose_epsilon(events: Iterable[_ev.DpEvent], delta: float, *, neighbouring=DEFAULT_NEIGHBOURING,
                    pld_interval: float = _PLD_INTERVAL) -> float:
    """ε at ``delta`` of all ``events`` composed: exactly by GDP when every event is a full-batch Gaussian
    (μ = √Σ 1/σ²; tight), else by dp-accounting's PLD accountant (a pessimistic discretization).

    ``inf`` when an event is non-private (``NonPrivateDpEvent``); 0 for no events.
    """
    events = list(events)
    if any(_non_private(e) for e in events):
        return math.inf
    sigmas = _gdp_sigmas(events)
    if sigmas is not None:
        sigmas = [s for s in sigmas if np.isfinite(s)]
        return gdp_epsilon(sigmas, _check_delta(delta), neighbouring) if sigmas else 0.0
    acc = make_accountant("pld", neighbouring, pld_interval=pld_interval)
    n = 0
    for event in events:
        if not acc.supports(event):
            raise ValueError(f"the PLD accountant cannot compose {event!r} under {relation_name(neighbouring)}")
        acc.compose(event)
        n += 1
    if n == 0:
        return 0.0
    return max(0.0, float(acc.get_epsilon(_check_delta(delta))))


def _gdp_sigmas(events: list) -> list[float] | None:
    """σ of every Gaussian when all ``events`` are full-batch Gaussians (exact GDP composes them), else None."""
    return _flatten_gaussians(_ev.ComposedDpEvent(events))


def composition_name(events: Iterable[_ev.DpEvent]) -> str:
    """How :func:`compose_epsilon` composes ``events``: ``"exact GDP"`` or ``"PLD"`` (for reports)."""
    return "exact GDP" if _gdp_sigmas(list(events)) is not None else "PLD"


def _check_delta(delta: float) -> float:
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return delta


def _multipliers(noise_multipliers) -> np.ndarray:
    sig = np.atleast_1d(np.asarray(noise_multipliers, dtype=np.float64)).ravel()
    if sig.size == 0:
        raise ValueError("need at least one noise multiplier")
    if np.any(np.isnan(sig)) or np.any(sig <= 0):
        raise ValueError(f"noise multipliers must be > 0 (use inf for a mechanism that adds no information), got {sig}")
    return sig


# --------------------------------------------------------------------------- Gaussian DP (exact, full batch)

def gdp_mu(noise_multipliers, neighbouring=DEFAULT_NEIGHBOURING) -> float:
    """μ of the composition of full-batch Gaussian mechanisms: μ = sqrt(Σ 1/σ_i²).

    Parameters
    ----------
    noise_multipliers : float or sequence of float
        σ_i of each mechanism (sensitivity C, noise std σ_i·C); ``inf`` adds nothing.
    neighbouring : str
        Under ``"replace_one"`` the sensitivity is 2C, which doubles μ.
    """
    sig = _multipliers(noise_multipliers)
    return sensitivity_factor(neighbouring) * float(np.sqrt(np.sum(1.0 / sig**2)))


def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP (Dong et al. Cor. 2.13): Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2).

    Computed in log space so it stays accurate for tiny δ and large ε.
    """
    if mu <= 0:
        return 0.0
    a = special.log_ndtr(-epsilon / mu + mu / 2.0)
    b = epsilon + special.log_ndtr(-epsilon / mu - mu / 2.0)
    if b >= a:
        return 0.0
    return float(np.exp(a) * -np.expm1(b - a))


def gdp_epsilon(noise_multipliers, delta: float, neighbouring=DEFAULT_NEIGHBOURING) -> float:
    """Exact ε at ``delta`` of full-batch Gaussian mechanisms composed under GDP.

    Parameters
    ----------
    noise_multipliers : float or sequence of float
        One σ per mechanism (e.g. ``[sigma_center] + [sigma] * steps``).
    delta : float
        Target δ in (0, 1).

    Returns
    -------
    float
        The smallest ε ≥ 0 with δ(ε) ≤ delta (root-found; δ(ε) is decreasing).
    """
    delta = _check_delta(delta)
    return _gdp_epsilon_of_mu(gdp_mu(noise_multipliers, neighbouring), delta)


def _gdp_epsilon_of_mu(mu: float, delta: float) -> float:
    if mu == 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = max(1.0, mu * mu)
    while gdp_delta(mu, hi) > delta:
        hi *= 2.0
    eps = optimize.brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-12, rtol=1e-12)
    # brentq brackets the root; step to the side that certainly meets delta.
    while gdp_delta(mu, eps) > delta:
        eps = math.nextafter(eps, math.inf) * (1 + 1e-12)
    return float(eps)


def gdp_mu_for(epsilon: float, delta: float) -> float:
    """The largest μ whose μ-GDP guarantee implies (ε, δ)-DP."""
    delta = _check_delta(delta)
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    lo, hi = 1e-8, 1.0
    while gdp_delta(hi, epsilon) < delta:
        hi *= 2.0
    mu = optimize.brentq(lambda m: gdp_delta(m, epsilon) - delta, lo, hi, xtol=1e-14, rtol=1e-13)
    while gdp_delta(mu, epsilon) > delta:  # never overshoot
        mu *= 1 - 1e-12
    return float(mu)


# --------------------------------------------------------------------------- dp-accounting events

def dp_event(noise_multiplier: float, *, steps: int = 1, sample_rate: float = 1.0,
             extra_noise_multipliers: Sequence[float] = ()) -> _ev.DpEvent:
    """The dp-accounting event of a training plan.

    Parameters
    ----------
    noise_multiplier : float
        σ of every training step.
    steps : int
        Number of steps T.
    sample_rate : float
        Poisson sampling probability q of each step; 1.0 means full batch (no sampling event).
    extra_noise_multipliers : sequence of float
        Full-batch Gaussian mechanisms run once before training (private centering, ...).

    Returns
    -------
    dp_accounting.DpEvent
        ``ComposedDpEvent([Gaussian(σ_extra)..., SelfComposed(PoissonSampled(q, Gaussian(σ)), T)])``.
    """
    steps = int(steps)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    _multipliers([noise_multiplier, *extra_noise_multipliers])
    step = _ev.GaussianDpEvent(float(noise_multiplier))
    if sample_rate < 1.0:
        step = _ev.PoissonSampledDpEvent(float(sample_rate), step)
    train = _ev.SelfComposedDpEvent(step, steps) if steps > 1 else step
    events = [_ev.GaussianDpEvent(float(s)) for s in extra_noise_multipliers if np.isfinite(s)]
    return _ev.ComposedDpEvent(events + [train]) if events else train


def _non_private(event) -> bool:
    """Whether an event (or one inside it) releases without noise: the total is then ∞, no accountant needed."""
    if isinstance(event, _ev.NonPrivateDpEvent):
        return True
    inner = getattr(event, "event", None)
    if inner is not None and _non_private(inner):
        return True
    return any(_non_private(e) for e in getattr(event, "events", ()) or ())


def _flatten_gaussians(event: _ev.DpEvent, count: int = 1) -> list[float] | None:
    """The σ list of an event made only of full-batch Gaussians (for GDP), else None."""
    if isinstance(event, _ev.GaussianDpEvent):
        return [event.noise_multiplier] * count
    if isinstance(event, _ev.SelfComposedDpEvent):
        return _flatten_gaussians(event.event, count * event.count)
    if isinstance(event, _ev.ComposedDpEvent):
        out: list[float] = []
        for e in event.events:
            sub = _flatten_gaussians(e, count)
            if sub is None:
                return None
            out += sub
        return out
    if isinstance(event, _ev.NoOpDpEvent):
        return []
    return None


def event_epsilon(event: _ev.DpEvent, delta: float, *, accountant: str = "pld",
                  neighbouring=DEFAULT_NEIGHBOURING, pld_interval: float = _PLD_INTERVAL) -> float:
    """ε at ``delta`` of any dp-accounting ``event``.

    ``accountant="gdp"`` requires an event of full-batch Gaussians only (exact);
    ``"pld"`` and ``"rdp"`` use dp-accounting (RDP does not support ``"replace_one"``).

    dp-accounting's results are memoized per process on an exact description of the public inputs (event
    structure, every number with its type and all its bits): a repeated call returns the float the first computed.
    ``event_epsilon.uncached`` computes without the cache; ``cache_info`` / ``cache_clear`` as functools'.
    """
    args = (event, delta, accountant, neighbouring, pld_interval)
    if accountant == "gdp":  # closed form, ~1 ms: not worth a cache entry
        return _event_epsilon(*args)
    key = _public_key(lambda: (_event_key(event), _leaf_key(delta), _leaf_key(accountant),
                               relation_name(neighbouring), _leaf_key(pld_interval)))
    if key is None:  # not describable exactly (an unknown event class, a numpy scalar, ...): compute it
        return _event_epsilon(*args)
    return _event_epsilon_cached(_Keyed(args, key))


def _event_epsilon(event, delta, accountant="pld", neighbouring=DEFAULT_NEIGHBOURING, pld_interval=_PLD_INTERVAL):
    delta = _check_delta(delta)
    if accountant == "gdp":
        sig = _flatten_gaussians(event)
        if sig is None:
            raise ValueError("accountant='gdp' is exact only for full-batch Gaussian mechanisms; "
                             "use 'pld' or 'rdp' for Poisson-subsampled steps")
        sig = [s for s in sig if np.isfinite(s)]
        return gdp_epsilon(sig, delta, neighbouring) if sig else 0.0
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    acc = make_accountant(accountant, neighbouring, pld_interval=pld_interval)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _event_epsilon_cached(keyed: "_Keyed") -> float:
    return _event_epsilon(*keyed.args)


event_epsilon.uncached = _event_epsilon
event_epsilon.cache_info = _event_epsilon_cached.cache_info
event_epsilon.cache_clear = _event_epsilon_cached.cache_clear


def dpsgd_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  accountant: str = "pld", neighbouring=DEFAULT_NEIGHBOURING) -> float:
    """ε of ``steps`` Poisson-subsampled Gaussian steps (DP-SGD) at ``delta``.

    ``sample_rate=1`` is full-batch DP-SGD; there ``accountant="gdp"`` is exact.
    """
    return event_epsilon(dp_event(noise_multiplier, steps=steps, sample_rate=sample_rate), delta,
                         accountant=accountant, neighbouring=neighbouring)


# --------------------------------------------------------------------------- calibration

def calibrate_noise(epsilon: float, delta: float, *, steps: int = 1, sample_rate: float = 1.0,
                    accountant: str = "gdp", neighbouring=DEFAULT_NEIGHBOURING,
                    extra_ratios: Sequence[float] = (), rtol: float = 1e-3) -> float:
    """The smallest training noise multiplier σ whose plan meets (ε, δ); never overshoots.

    Parameters
    ----------
    epsilon, delta : float
        Target; ε > 0 and 0 < δ < 1.
    steps, sample_rate : int, float
        The training plan (``sample_rate=1``: full batch).
    accountant : {"gdp", "pld", "rdp"}
        "gdp" is exact for full-batch plans and is solved in closed form.
    extra_ratios : sequence of float
        Extra full-batch Gaussian mechanisms sharing the budget, each with multiplier
        ``ratio * σ`` (the plan's releases: :func:`privlin.plan.make_plan` is the one σ split).
    rtol : float
        Relative precision of the search on σ (dp-accounting accountants).

    Returns
    -------
    float
        σ such that the plan's ε at ``delta`` is ≤ ``epsilon``, within ``rtol`` of the smallest such σ.

    Memoized per process on the exact public inputs, like :func:`event_epsilon` (``calibrate_noise.uncached``
    computes without this cache; ``cache_info`` / ``cache_clear`` as functools').
    """
    try:
        extra_ratios = tuple(extra_ratios)  # read once (it may be an iterator)
    except TypeError:
        pass  # refused below, as before
    args = (epsilon, delta, steps, sample_rate, accountant, neighbouring, extra_ratios, rtol)
    key = _public_key(lambda: (_leaf_key(epsilon), _leaf_key(delta), _leaf_key(steps), _leaf_key(sample_rate),
                               _leaf_key(accountant), relation_name(neighbouring),
                               tuple(_leaf_key(float(r)) for r in extra_ratios), _leaf_key(rtol)))
    if key is None:
        return _calibrate_noise(*args)
    return _calibrate_noise_cached(_Keyed(args, key))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _calibrate_noise_cached(keyed: "_Keyed") -> float:
    return _calibrate_noise(*keyed.args)


def _calibrate_noise(epsilon, delta, steps=1, sample_rate=1.0, accountant="gdp", neighbouring=DEFAULT_NEIGHBOURING,
                     extra_ratios=(), rtol=1e-3) -> float:
    delta = _check_delta(delta)
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if math.isinf(epsilon):
        return 0.0  # the non-private baseline: no noise, no guarantee (callers label it as such)
    epsilon = float(epsilon)  # a NumPy float32 target made the search below creep ~92 000 times
    ratios = [float(r) for r in extra_ratios]
    if any(not r > 0 for r in ratios):
        raise ValueError(f"extra_ratios must be > 0, got {ratios}")

    def eps_of(sigma: float, interval: float = _PLD_INTERVAL) -> float:
        ev = dp_event(sigma, steps=steps, sample_rate=sample_rate, extra_noise_multipliers=[r * sigma for r in ratios])
        # dp-accounting's fine-grid checks go through event_epsilon's cache: the last one is the event of the plan
        # that gets this σ, which its report accounts again.  The coarse search probes are never asked for twice.
        ee = event_epsilon if interval == _PLD_INTERVAL and accountant != "gdp" else _event_epsilon
        return ee(ev, delta, accountant=accountant, neighbouring=neighbouring, pld_interval=interval)

    if accountant == "gdp" and sample_rate >= 1.0:
        mu = gdp_mu_for(epsilon, delta)
        sigma = sensitivity_factor(neighbouring) * math.sqrt(steps + sum(1.0 / r**2 for r in ratios)) / mu
        step = 1e-12
        while eps_of(sigma) > epsilon:  # float rounding only: a few steps, each twice the last
            sigma *= 1 + step
            step *= 2
        return sigma

    # Search with a coarser PLD grid (still a pessimistic upper bound, and faster), from a
    # CLT guess (μ ≈ q·sqrt(T)/σ), then check the answer with the fine grid.
    coarse = 10 * _PLD_INTERVAL
    mu = gdp_mu_for(epsilon, delta)
    hi = max(_SIGMA_FLOOR, math.sqrt((sample_rate**2) * steps + sum(1.0 / r**2 for r in ratios)) / mu)
    while eps_of(hi, coarse) > epsilon:
        hi *= 1.5
        if hi > 1e7:
            raise ValueError(f"no noise multiplier reaches epsilon={epsilon} for this plan")
    lo = hi / 1.5
    while eps_of(lo, coarse) <= epsilon:
        hi, lo = lo, lo / 1.5
        if lo < _SIGMA_FLOOR:  # hi meets the target; less noise cannot be accounted in memory
            lo = hi
            break
    while hi - lo > rtol * hi:  # invariant: eps_of(hi) <= epsilon < eps_of(lo)
        mid = math.sqrt(lo * hi)
        if eps_of(mid, coarse) <= epsilon:
            hi = mid
        else:
            lo = mid
    while eps_of(hi) > epsilon:  # the fine grid agrees in practice; never return an overshoot
        hi *= 1 + rtol
    return hi


calibrate_noise.uncached = _calibrate_noise
calibrate_noise.cache_info = _calibrate_noise_cached.cache_info
calibrate_noise.cache_clear = _calibrate_noise_cached.cache_clear


# --------------------------------------------------------------------------- memoization on public inputs

class _Keyed:
    """Call arguments with a hashable key that describes them exactly: the entry functools.lru_cache stores.

    Equal keys mean the same computation (same classes, same numbers bit for bit), hence the same float.
    Only public plan parameters are ever keyed (ε, δ, T, q, σ, ratios, relation and accountant names).
    """
    __slots__ = ("args", "key", "_hash")

    def __init__(self, args, key):
        self.args, self.key, self._hash = args, key, hash(key)

    def __eq__(self, other):
        return isinstance(other, _Keyed) and self.key == other.key

    def __hash__(self):
        return self._hash


class _Unkeyable(Exception):
    pass


def _public_key(make):
    """``make()``, or None when the inputs have no exact key (the caller then computes without the cache)."""
    try:
        return make()
    except (_Unkeyable, TypeError, ValueError):
        return None


def _leaf_key(value):
    """A number or name with its exact type; floats by all their bits (-0.0 and 0.0, 1 and 1.0 stay apart)."""
    if value is None or type(value) in (bool, int, str):
        return (type(value), value)
    if isinstance(value, float):  # float and its subclasses (numpy.float64), each its own type
        return (type(value), float.hex(float(value)))
    raise _Unkeyable(type(value))


def _event_key(event):
    """A dp-accounting event (nested attrs classes, lists of events, numbers) as nested tuples."""
    if attr.has(type(event)) and isinstance(event, _ev.DpEvent):
        return (type(event), tuple((f.name, _event_key(getattr(event, f.name))) for f in attr.fields(type(event))))
    if type(event) in (list, tuple):
        return (type(event), tuple(_event_key(e) for e in event))
    return _leaf_key(event)
