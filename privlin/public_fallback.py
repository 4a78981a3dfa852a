"""The public check in a fit: charged with the costlier of the two plans that may follow it, released on the private
rows before the fit runs, and the plan chosen from its noisy count (the check itself:
:mod:`privlin.releases.public_check`; which settings take it: :meth:`privlin.public.Public.inputs`)."""
from __future__ import annotations

import dataclasses
from typing import Callable

from . import accounting, data, noise
from .plan import START, Plan, make_plan
from .releases import public_check
from .releases.base import release_key
from .rows import Rows

__all__ = ["Given", "Check", "charging_checked", "checked"]


class Given(dict):
    """``{release name: value}`` of the public statistics, with ``checks``: per setting, its :class:`Check` (None:
    the setting takes none), which :func:`checked` releases before the plans run."""

    def __init__(self, values, checks=()):
        super().__init__(values)
        self.checks = list(checks)


@dataclasses.dataclass(frozen=True, eq=False)
class Check:
    """One setting's public check (:mod:`privlin.releases.public_check`), from public facts: the ``reference``,
    the count's ``sigma``, the parameters of the plan with the public statistics (``rest_params``) and of the
    private defaults' plan (``fallback_params``), both on the budget the check leaves."""

    reference: public_check.Reference
    sigma: float
    rest_params: dict
    fallback_params: dict

    def fallback_plan(self, n: int, dim: int, classes=None) -> Plan:
        """The private defaults' plan the fit runs where the check fails: every statistic released privately, the
        DP steps still started from the public rows where the setting asks (``public_start``: not a statistic)."""
        given = (START,) if self.fallback_params.get("public_start") else ()
        return make_plan(self.fallback_params, n=n, dim=dim, n_classes=None if classes is None else classes.size,
                         classes=classes, given=given)

    def with_check(self, plan: Plan) -> Plan:
        """``plan`` with the check at the head of its chain (given releases placed one later) and the ε of the
        whole: what the ledger charges and the report shows."""
        full = dataclasses.replace(plan, chain=((public_check.PUBLIC_CHECK, self.sigma), *plan.chain),
                                   given=tuple((g, before + 1) for g, before in plan.given))
        return dataclasses.replace(full, epsilon=accounting.event_epsilon(
            full.dp_event(), full.delta, accountant=full.accountant, neighbouring=full.neighbouring))

    def charged(self, plan: Plan) -> Plan:
        """The plan a ledger charges for ``plan`` (made from :attr:`rest_params`): the check with whichever of
        ``plan`` and the fallback costs more, so the charge covers the one that runs."""
        fallback = self.fallback_plan(plan.n, plan.dim)
        return self.with_check(plan if plan.epsilon >= fallback.epsilon else fallback)


def charging_checked(charge: Callable, checks) -> Callable:
    """``charge(ledger, plans)`` charging each checked setting's plan with its check (:meth:`Check.charged`)."""
    def charge_with_checks(led, plans):
        return charge(led, [p if c is None else c.charged(p) for p, c in zip(plans, checks)])
    return charge_with_checks


def checked(plans, source: data.Source, keys, classes, given, *, block_rows: int, verbose: bool):
    """Release each checked setting's check on the private rows and choose its plan: ``(plans to run, plans as
    released, outcomes)`` — the plan with the public statistics where the check passes, else the private defaults'
    plan (:meth:`Check.fallback_plan`); as released, each with its check (:meth:`Check.with_check`); outcomes
    ``{i: Outcome}``.  Charged before (:meth:`privlin.public.Public.inputs`); the decision reads the noisy count only."""
    checks = getattr(given, "checks", None) or [None] * len(plans)
    if not any(c is not None for c in checks):
        return list(plans), list(plans), {}
    ref = next(c.reference for c in checks if c is not None)
    exact = public_check.count_within(((X, mask) for X, _, mask in Rows(source, classes, block_rows,
                                                                          verbose).host_blocks()), ref)
    run, shown, outcomes = [], [], {}
    for i, (plan, key, c) in enumerate(zip(plans, keys, checks)):
        if c is None:
            run.append(plan), shown.append(plan)
            continue
        noisy = float(noise.noisy_counts([exact], c.sigma, release_key(key, public_check.NAME), secure=plan.secure_mode,
                                   bound=float(source.n))[0])
        bar = public_check.threshold(c.reference, source.n, c.sigma)
        ok = public_check.passes(noisy, c.reference, source.n, c.sigma)
        chosen = plan if ok else c.fallback_plan(source.n, source.dim, classes)
        run.append(chosen), shown.append(c.with_check(chosen))
        outcomes[i] = public_check.Outcome(noisy, bar, float(ok))
    del exact  # the exact count never leaves this function
    return run, shown, outcomes
