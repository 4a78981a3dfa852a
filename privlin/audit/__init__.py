"""Empirical privacy audits: a lower bound on the ε a trainer really gives.

A privacy guarantee is a claim about code. An audit runs the code and attacks
it: if a membership-inference attack on a worst-case *canary* succeeds more
often than ε allows, the code is broken, whatever its accountant says.

Two audits, both statistically valid lower bounds (at a stated confidence):

* :func:`canary_audit` — many runs with one canary and with a null row in its place (zero-out
  neighbours). Half of the runs choose the attack (score function, threshold,
  direction); the other half measure its false-positive and false-negative
  rates, whose Clopper–Pearson upper bounds turn into ε via the hypothesis-test
  view of (ε, δ)-DP (Kairouz, Oh & Viswanath 2015):
  ``FPR + e^ε FNR ≥ 1 − δ`` and ``FNR + e^ε FPR ≥ 1 − δ``. Linear models are
  cheap, so the runs are batched with ``jax.vmap`` over seeds.
* :func:`one_run_audit` — Steinke, Nasr & Jagielski (2023): m canaries, each
  included with probability ½, *one* training run; the attacker guesses the
  k highest- and k lowest-scoring canaries; the number of correct guesses gives
  a p-value for "the mechanism is (ε, δ)-DP" (their Theorem / appendix code).
  Usable on a real store where thousands of runs cost too much.

The bounds can only be as large as the number of runs allows: with n evaluation
runs per world, ``ε_lb ≤ log(n / ~3.7)`` at 95 % (≈ 4.2 for n = 250), so an
audit at ε = 8 is loose by construction. See PRIVACY.md.

Command line: ``python -m privlin.audit --method gaussian_sum --epsilon 1 --runs 1000``.

Modules: :mod:`~privlin.audit.bounds` (from an attack's errors to ε), :mod:`~privlin.audit.canary` (many runs with
and without a canary, and the attacks), :mod:`~privlin.audit.methods` (privlin's methods as trainers),
:mod:`~privlin.audit.cli` (the command line).
"""
from __future__ import annotations

from .bounds import (AuditResult, clopper_pearson, epsilon_from_error_rates, epsilon_lower_bound, one_run_audit,
                     one_run_epsilon, one_run_p_value, threshold_audit)
from .canary import ATTACKS, canary_audit, dirac_canary, gaussian_sum_trainer, run_many
from .cli import _audit_parser, main  # noqa: F401 - the parser, for the command-line conventions' test
from .methods import AUDITS, audit_method, estimator_trainer, one_run_estimator_audit

__all__ = [
    "clopper_pearson",
    "epsilon_from_error_rates",
    "epsilon_lower_bound",
    "AuditResult",
    "threshold_audit",
    "one_run_p_value",
    "one_run_epsilon",
    "one_run_audit",
    "run_many",
    "canary_audit",
    "dirac_canary",
    "gaussian_sum_trainer",
    "estimator_trainer",
    "one_run_estimator_audit",
    "audit_method",
    "AUDITS",
    "ATTACKS",
    "main",
]
