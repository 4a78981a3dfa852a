"""The private plan: everything about one private fit that is decided before any row is read.

Why one place: a default learning rate, a σ split or a bias init computed in two modules drifts (ours did:
the sweep and the estimator trained different pipelines at the same ε).  :func:`make_plan` is the only
function that turns the estimator's parameters and the public facts (N, dimension, number of classes) into
a :class:`Plan`; the estimator, ``privlin.fit``, the sweep, the selection, the audit and the experiments all
call it, and :mod:`privlin.runner` runs what it returns.

A plan is public by construction: it depends on the parameters and on N, d, k only.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from dp_accounting import dp_event as _ev

from . import accounting

__all__ = ["Plan", "make_plan", "METHODS", "DEFAULT_EPSILON", "DEFAULT_STEPS", "LR_NOISE_RATIO",
           "NON_PRIVATE_SGD_LR"]

#: The methods a plan can run (see :mod:`privlin.train`).
METHODS = ("adam1", "sgd", "minibatch")
#: ε when none is given: the estimator, ``privlin.fit`` and the sweep share it.
DEFAULT_EPSILON = 1.0
#: Default steps per method: adam1 is one step by definition; sgd follows DP-RandP (T=100).
DEFAULT_STEPS = {"adam1": 1, "sgd": 100, "minibatch": 200}
#: lr · σ / B of DP-RandP's tuned CIFAR-10 linear probes (seed 004, Table 22): ≈ 0.008 at every ε.
LR_NOISE_RATIO = 0.008
#: Learning rate of non-private (σ = 0) SGD, where the noise-scaled rule is undefined.
NON_PRIVATE_SGD_LR = 1.0
#: Learning rate of adam1 (Mehta et al. App. F.1) and of Adam/LAMB.
ADAM_LR = 1e-3


@dataclasses.dataclass(frozen=True)
class Plan:
    """One private fit, fully decided: what runs, with which noise, and what it costs.

    Attributes
    ----------
    method : {"adam1", "sgd", "minibatch"}
    epsilon, delta : float
        The guarantee of the plan (ε = inf: the non-private baseline).  When the noise multiplier was given
        rather than calibrated, ε is the one it achieves.
    neighbouring : str
        dp-accounting's relation name (``"replace_special"``, ``"replace_one"``, ``"add_or_remove_one"``).
    accountant : {"gdp", "pld", "rdp", "none"}
    n, dim, n_classes : int
        Public facts the plan was made for.
    steps : int
    sample_rate : float
        Poisson rate q of each step (1.0: full batch).
    sigma : float
        Noise multiplier of every training step (0: non-private).
    sigma_center : float
        Noise multiplier of the private centering (inf: no centering).
    learning_rate : float
    clip : float
        Per-example gradient norm bound C; with ``normalize`` rows are scaled to norm C first.
    normalize : bool
    loss : {"sigmoid", "softmax"}
    bias_init : float
    fit_intercept : bool
    optimizer : {"sgd", "adam", "lamb"}
    momentum : float
    secure_mode : bool
    """

    method: str
    epsilon: float
    delta: float
    neighbouring: str
    accountant: str
    n: int
    dim: int
    n_classes: int
    steps: int
    sample_rate: float
    sigma: float
    sigma_center: float
    learning_rate: float
    clip: float
    normalize: bool
    loss: str
    bias_init: float
    fit_intercept: bool
    optimizer: str
    momentum: float
    secure_mode: bool = False

    @property
    def private(self) -> bool:
        return self.sigma > 0

    @property
    def centered(self) -> bool:
        return not math.isinf(self.sigma_center)

    @property
    def center_share(self) -> float:
        """Share of the GDP budget μ² spent on centering (0 without centering)."""
        if not self.centered or not self.private:
            return 0.0
        c, t = 1.0 / self.sigma_center**2, self.steps * self.sample_rate**2 / self.sigma**2
        return c / (c + t)

    def dp_event(self) -> _ev.DpEvent:
        """The dp-accounting event of the whole plan (centering, then the training steps)."""
        if not self.private:
            return _ev.NonPrivateDpEvent()
        return accounting.dp_event(self.sigma, steps=self.steps, sample_rate=self.sample_rate,
                                   extra_noise_multipliers=[self.sigma_center] if self.centered else [])

    def noise_multipliers(self) -> dict:
        """σ of each mechanism, as the report shows them."""
        return {"center": self.sigma_center, "step": self.sigma} if self.centered else {"step": self.sigma}

    def static(self) -> tuple:
        """What a compiled trainer specializes on (hashable); plans with equal ``static()`` run vmapped together."""
        return (self.method, self.steps, self.sample_rate, self.clip, self.normalize, self.centered, self.loss,
                self.bias_init, self.fit_intercept, self.optimizer, self.momentum)


def make_plan(params: Mapping[str, Any], *, n: int, dim: int, n_classes: int | None) -> Plan:
    """The plan of ``DPLinearClassifier(**params)`` on N = ``n`` rows of dimension ``dim`` with ``n_classes``.

    ``params`` are the estimator's parameters (``DPLinearClassifier.get_params()``; missing keys take the
    estimator's defaults).  Only public facts enter.  ``n_classes=None``: not known yet (the class list will
    be read from the labels after the charge); the noise, and so the event charged, never depend on it.

    Raises
    ------
    ValueError
        A combination no plan can run (adam1 with several steps, GDP for a subsampled plan, ...).
    """
    from .estimator import DPLinearClassifier  # the parameter defaults live in its signature

    p = {**DPLinearClassifier().get_params(), **dict(params)}
    n, dim, k = int(n), int(dim), (0 if n_classes is None else int(n_classes))
    if n < 1:
        raise ValueError("no rows to fit on")
    if n_classes is not None and k < 2:
        raise ValueError(f"a classifier needs at least 2 classes; got {k}")
    method = p["method"]
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    steps = int(p["steps"] or DEFAULT_STEPS[method])
    if method == "adam1" and steps != 1:
        raise ValueError(f"method='adam1' is a single step; got steps={steps} (use method='sgd' or 'minibatch')")
    q = 1.0 if method != "minibatch" else min(1.0, p["batch_size"] / n)
    relation = accounting.relation_name(p["neighbouring"])
    if relation == "add_or_remove_one":
        raise ValueError("privlin's trainers publish N (they divide by it and report it), which tells D from "
                         "D ∪ {x}: use neighbouring='replace_special' (zero-out: one example replaced by a null "
                         "one, N public), which dp-accounting accounts exactly as add/remove-one")
    center = bool(p["center"]) or p["center_noise_multiplier"] is not None
    if center and not p["normalize"]:
        raise ValueError("private centering needs normalize=True (rows of norm `clip` bound the mean's sensitivity)")
    share = float(p["center_share"]) if center else 0.0
    sigma_given = p["noise_multiplier"]
    epsilon = p["epsilon"]
    if (epsilon is None) == (sigma_given is None):
        raise ValueError("give epsilon (the noise is calibrated to it) or noise_multiplier (the ε it achieves is "
                         "reported), not both" if epsilon is not None else "give epsilon or noise_multiplier")
    acct = p["accountant"] or ("gdp" if q >= 1.0 else "pld")
    if acct == "gdp" and q < 1.0:
        raise ValueError("accountant='gdp' is exact only for full-batch methods; use 'pld' or 'rdp' for minibatch")

    if sigma_given is not None:
        sigma = float(sigma_given)
        if center:
            if p["center_noise_multiplier"] is None:
                raise ValueError("with noise_multiplier given, give center_noise_multiplier too (or center=False)")
            sigma_c = float(p["center_noise_multiplier"])
        else:
            sigma_c = math.inf
    elif math.isinf(epsilon):
        sigma, sigma_c = 0.0, (0.0 if center else math.inf)
    else:
        sigma, sigma_c = _calibrate(float(epsilon), float(p["delta"]), steps=steps, q=q, share=share,
                                    accountant=acct, relation=relation)

    loss = p["loss"] or ("sigmoid" if method == "adam1" else "softmax")
    optimizer = "sgd" if method == "sgd" else ("adam" if method == "adam1" else p["optimizer"])
    lr = p["learning_rate"]
    if lr is None:
        lr = default_learning_rate(method, optimizer, sigma, q * n)
    plan = Plan(method=method, epsilon=math.inf, delta=float(p["delta"]), neighbouring=relation,
                accountant="none" if sigma == 0 else acct, n=n, dim=dim, n_classes=k, steps=steps, sample_rate=q,
                sigma=sigma, sigma_center=sigma_c, learning_rate=float(lr), clip=float(p["clip"]),
                normalize=bool(p["normalize"]), loss=loss, bias_init=-10.0 if loss == "sigmoid" else 0.0,
                fit_intercept=bool(p["fit_intercept"]), optimizer=optimizer, momentum=float(p["momentum"]),
                secure_mode=bool(p["secure_mode"]))
    if plan.private:
        eps = accounting.event_epsilon(plan.dp_event(), plan.delta, accountant=acct, neighbouring=relation)
        plan = dataclasses.replace(plan, epsilon=eps)
    return plan


def _calibrate(epsilon, delta, *, steps, q, share, accountant, relation) -> tuple[float, float]:
    """(σ, σ_center) spending ``share`` of the budget on centering; never overshoots ε."""
    if q >= 1.0 and accountant == "gdp":
        return accounting.split_noise(epsilon, delta, steps=steps, center_share=share, neighbouring=relation)
    # Centering gets the share of μ² it would get if the T sampled steps were Gaussian with
    # μ² ≈ q²T/σ² (CLT, Bu et al.); the accountant then checks the whole plan exactly.
    ratios = [math.sqrt((1 - share) / (share * steps * q * q))] if share > 0 else []
    sigma = accounting.calibrate_noise(epsilon, delta, steps=steps, sample_rate=q, accountant=accountant,
                                       neighbouring=relation, extra_ratios=ratios)
    return sigma, (ratios[0] * sigma if ratios else math.inf)


def default_learning_rate(method: str, optimizer: str, sigma: float, batch: float) -> float:
    """The learning rate when none is given (public: from σ and the expected batch size B = q·N).

    SGD: ``LR_NOISE_RATIO · B / σ`` — DP-RandP's tuned CIFAR-10 rates (Table 22) all satisfy lr·σ/B ≈ 0.008
    for ε ∈ [0.1, 8], i.e. the noise moves each weight by the same amount per step whatever the budget.
    adam1 and Adam/LAMB: 1e-3 (Mehta et al. App. F.1; Adam's step does not scale with the gradient).
    """
    if method == "adam1" or optimizer != "sgd":
        return ADAM_LR
    if sigma == 0.0:
        return NON_PRIVATE_SGD_LR
    return LR_NOISE_RATIO * batch / sigma
