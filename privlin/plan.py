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

import jax.numpy as jnp
from dp_accounting import dp_event as _ev

from . import accounting, preprocess, radius, scaling, sensitivity

__all__ = ["Plan", "make_plan", "default_learning_rate", "METHODS", "DEFAULT_EPSILON", "DEFAULT_STEPS",
           "LOGIT_NOISE", "DEFAULT_CENTER_SHARE", "DEFAULT_SCALE_SHARE", "CURVATURE_SHARE", "RADIUS_SHARE", "RECENTER_SHARE",
           "ADAM_LR",
           "stability_caps", "learning_rates"]

#: The methods a plan can run (see :mod:`privlin.train`).
METHODS = ("adam1", "sgd", "minibatch")
#: ε when none is given: the estimator, ``privlin.fit`` and the sweep share it.
DEFAULT_EPSILON = 1.0
#: Default steps per method: adam1 is one step by definition; sgd follows DP-RandP (T=100, Tables 22-23); see
#: :func:`default_learning_rate` for why more steps buy nothing at a fixed noise per logit.
DEFAULT_STEPS = {"adam1": 1, "sgd": 100, "minibatch": 200}
#: ρ: standard deviation, in logits of a row at norm C, of the training noise accumulated in the weights by the
#: end of training (see :func:`default_learning_rate`).  DP-RandP's tuned CIFAR-10 probes (seed 004, Table 22:
#: T=100, momentum 0.9, lr·σ/N ≈ 0.008 for every ε in [0.1, 8]) sit at ρ = 0.008·√100/(1−0.9) = 0.8.
LOGIT_NOISE = 0.8
#: Share of the GDP budget μ² spent on private centering, and on the scaling stage (:mod:`privlin.scaling`).
DEFAULT_CENTER_SHARE = 0.05
DEFAULT_SCALE_SHARE = 0.15
#: Share of μ² spent on releasing the training rows' curvature (:func:`privlin.scaling.release_curvature`), made only
#: where the stability cap, not the noise, would set the learning rate (:func:`make_plan`).
CURVATURE_SHARE = 0.01
#: Share of μ² spent on releasing a typical row norm (:mod:`privlin.radius`), made with the scaling stage where the
#: release can find it (:func:`make_plan`).
RADIUS_SHARE = 0.03
#: Share of μ² spent on the re-centering rounds before the centering (:func:`privlin.preprocess.recenter_rounds`),
#: made where the centering alone is coarse against the row norm (:func:`make_plan`).
RECENTER_SHARE = 0.05
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
        dp-accounting's relation name (``"replace_special"`` or ``"replace_one"``; add/remove is refused: N is
        published).
    accountant : {"gdp", "pld", "rdp", "none"}
    n, dim, n_classes : int
        Public facts the plan was made for.
    steps : int
    sample_rate : float
        Poisson rate q of each step (1.0: full batch).
    sigma : float
        Noise multiplier of every training step (0: non-private).
    sigma_center : float
        Noise multiplier of the private centering (inf: no centering): with ``center_stages`` = 2 the mean is
        released in two Gaussian stages at σ_center·√2 each, which compose to exactly one at σ_center.
    center_stages : int
        1, or 2 where a refining pass pays (:func:`privlin.preprocess.center_stages`, from public facts).
    sigma_recenter : float
        Noise multiplier of the re-centering rounds before the centering (inf: none made): ``recenter_rounds``
        Gaussian releases at σ_recenter·√rounds each, which compose to exactly one at σ_recenter.
    recenter_rounds : int
        0, or :data:`privlin.preprocess.RECENTER_ROUNDS` (:func:`privlin.preprocess.recenter_rounds`).
    sigma_scale, sigma_whiten : float
        Noise multipliers of the scaling stage's two releases (:mod:`privlin.scaling`): the per-dimension moments
        and the whitening second moment (inf: release not made).
    sigma_radius : float
        Noise multiplier of the row-norm release (inf: not made); with it rows gain a radial coordinate
        (:mod:`privlin.radius`) and the model has :attr:`model_dim` = dim + 1 inputs.
    sigma_curvature : float
        Noise multiplier of the curvature release (inf: not made), which lifts W's stability cap
        (:func:`learning_rates`).
    learning_rate : float
        The rate of every parameter unless the curvature release lifts W's (then the rate W's is lifted toward).
    learning_rate_ceiling : float
        The most the curvature release may lift W's rate to: the noise term of :func:`default_learning_rate`.
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
    sigma_scale: float = math.inf
    sigma_whiten: float = math.inf
    sigma_curvature: float = math.inf
    learning_rate_ceiling: float = math.nan
    sigma_radius: float = math.inf
    center_stages: int = 1
    sigma_recenter: float = math.inf
    recenter_rounds: int = 0

    @property
    def private(self) -> bool:
        return self.sigma > 0

    @property
    def centered(self) -> bool:
        return not math.isinf(self.sigma_center)

    @property
    def recentered(self) -> bool:
        """Whether re-centering rounds run before the centering (:func:`privlin.preprocess.recenter_rounds`)."""
        return self.recenter_rounds > 0

    @property
    def scaled(self) -> bool:
        """Whether the scaling stage runs (its moments release; whitening is :attr:`whitened`)."""
        return not math.isinf(self.sigma_scale)

    @property
    def whitened(self) -> bool:
        return not math.isinf(self.sigma_whiten)

    @property
    def radial(self) -> bool:
        """Whether rows gain the radial coordinate, from the released row norm (:mod:`privlin.radius`)."""
        return not math.isinf(self.sigma_radius)

    @property
    def model_dim(self) -> int:
        """Inputs of the model: the rows' dimension, plus the radial coordinate where it is made."""
        return self.dim + int(self.radial)

    @property
    def curved(self) -> bool:
        """Whether the curvature release runs (and may lift W's learning rate)."""
        return not math.isinf(self.sigma_curvature)

    def budget_shares(self) -> dict:
        """Share of the GDP budget μ² = Σ 1/σ² (Poisson steps: q²T/σ², their CLT value) of each mechanism."""
        if not self.private:
            return {}
        parts = {name: 1.0 / s**2 for name, s in self.noise_multipliers().items() if name != "step"}
        parts["step"] = self.steps * self.sample_rate**2 / self.sigma**2
        total = sum(parts.values())
        return {name: v / total for name, v in parts.items()}

    @property
    def center_share(self) -> float:
        """Share of the GDP budget μ² spent on centering (0 without centering)."""
        return self.budget_shares().get("center", 0.0)

    @property
    def scale_share(self) -> float:
        """Share of the GDP budget μ² spent on the scaling stage (moments and whitening; 0 without it)."""
        shares = self.budget_shares()
        return shares.get("scale", 0.0) + shares.get("whiten", 0.0)

    def dp_event(self) -> _ev.DpEvent:
        """The dp-accounting event of the whole plan (row norm, centering, scaling, curvature, then the steps)."""
        if not self.private:
            return _ev.NonPrivateDpEvent()
        extra = []
        for name, s in self.noise_multipliers().items():
            if name == "center":  # its stages, as they run (they compose to one Gaussian at σ_center)
                extra += [preprocess.stage_sigma(s, self.center_stages)] * self.center_stages
            elif name == "recenter":  # its rounds, likewise (they compose to one Gaussian at σ_recenter)
                extra += [preprocess.stage_sigma(s, self.recenter_rounds)] * self.recenter_rounds
            elif name != "step":
                extra.append(s)
        return accounting.dp_event(self.sigma, steps=self.steps, sample_rate=self.sample_rate,
                                   extra_noise_multipliers=extra)

    def noise_multipliers(self) -> dict:
        """σ of each mechanism that runs, in the order they run, as the report shows them."""
        out = {name: s for name, s in (("radius", self.sigma_radius), ("recenter", self.sigma_recenter),
                                       ("center", self.sigma_center),
                                       ("scale", self.sigma_scale),
                                       ("whiten", self.sigma_whiten), ("curvature", self.sigma_curvature))
               if not math.isinf(s)}
        out["step"] = self.sigma
        return out

    def scale_static(self) -> tuple | None:
        """The scaling stage as the compiled trainer sees it: ``(σ_scale/σ_center, σ_whiten/σ_center or None)``.

        The stage's multipliers are fixed multiples of the centering's (the ratio of their budget shares, the same
        at every ε), so a trainer vmapped over ε, or called with the centering's σ alone, runs exactly this plan.
        """
        if not self.scaled:
            return None
        return (self._per_center(self.sigma_scale), self._per_center(self.sigma_whiten) if self.whitened else None)

    def _per_center(self, sigma: float) -> float:
        """σ/σ_center: a one-off release's multiplier as a fixed multiple of the centering's (non-private: every σ
        is 0, and so is the ratio)."""
        return sigma / (self.sigma_center if self.sigma_center > 0 else 1.0)

    def learning_rates_after(self, curvature) -> tuple[float, float]:
        """(W's, b's) learning rate the fit ran with, given its released curvature bound (None: not released)."""
        if curvature is None or not self.curved:
            return self.learning_rate, self.learning_rate
        w, b = learning_rates(self.learning_rate_ceiling, float(curvature), momentum=self.momentum, clip=self.clip,
                              fit_intercept=self.fit_intercept)
        return float(w), float(b)

    def curvature_static(self) -> float | None:
        """σ_curvature/σ_center (a fixed ratio, as in :meth:`scale_static`), or None without the release."""
        if not self.curved:
            return None
        return self._per_center(self.sigma_curvature)

    def radius_static(self) -> float | None:
        """σ_radius/σ_center (a fixed ratio, as in :meth:`scale_static`), or None without the release."""
        if not self.radial:
            return None
        return self._per_center(self.sigma_radius)

    def recenter_static(self) -> tuple | None:
        """``(σ_recenter/σ_center, rounds)`` (a fixed ratio, as in :meth:`scale_static`), or None without rounds."""
        if not self.recentered:
            return None
        return (self._per_center(self.sigma_recenter), self.recenter_rounds)

    def static(self) -> tuple:
        """What a compiled trainer specializes on (hashable); plans with equal ``static()`` run vmapped together."""
        return (self.method, self.steps, self.sample_rate, self.clip, self.normalize, self.centered, self.loss,
                self.bias_init, self.fit_intercept, self.optimizer, self.momentum, self.scale_static(),
                self.curvature_static(), self.radius_static(), self.center_stages, self.recenter_static())


def make_plan(params: Mapping[str, Any], *, n: int, dim: int, n_classes: int | None) -> Plan:
    """The plan of ``DPLinearClassifier(**params)`` on N = ``n`` rows of dimension ``dim`` with ``n_classes``.

    ``params`` are the estimator's parameters (``DPLinearClassifier.get_params()``; missing keys take the
    estimator's defaults).  Only public facts enter.  ``n_classes=None``: not known yet (the class list will
    be read from the labels after the charge); the noise, and so the event charged, never depend on it.

    The defaults (every ``None`` parameter), all from public facts:

    * preprocessing: with the scaling stage, where the release can find it (:func:`_radius_pays`), a typical row
      norm (``radial``; :data:`RADIUS_SHARE` = 3% of μ²) and each row's log-norm as one more coordinate
      (:mod:`privlin.radius`: normalizing alone discards it); normalize, privately center (``center_share`` = 5% of μ²; in two stages where the first's expected error
      is between 1% and a third of the row norm, :func:`privlin.preprocess.center_stages`), then the scaling stage of
      :mod:`privlin.scaling` (``scale_share`` = 15% of μ², for ``sgd``/``minibatch``; ``adam1`` stays the one-pass
      method of Mehta et al.): per-dimension moments, and whitening where it can resolve two or more directions
      (:func:`privlin.scaling.whitening_resolves`; then the stage's share is split evenly between its two releases).
      A release that cannot be told from its own noise (:func:`privlin.scaling.moments_resolve`) is not made and
      its share goes to training.  Decided in GDP terms from (ε, δ, N, d) before calibration.
    * ``recenter``: with the scaling stage, where the centering's expected error is ≥ a tenth of the row norm
      (:func:`privlin.preprocess.recenter_rounds`, from its share's σ in the GDP view), two re-centering rounds
      before it (:data:`RECENTER_SHARE` = 5% of μ² on top of the centering's): few rows at small ε, where the
      centering alone cannot find a tight cloud's centre.  Never in secure mode.
    * ``fit_intercept``: True for ``sgd``/``minibatch`` — centered rows carry no constant direction, so without an
      intercept a model cannot express unequal class frequencies (1:10 imbalance); ``adam1`` keeps Mehta et al.'s
      frozen bias −10.
    * ``steps``, ``learning_rate``: :data:`DEFAULT_STEPS`, :func:`default_learning_rate`.
    * the curvature release (:data:`CURVATURE_SHARE` of μ², :func:`_curvature_pays`): with the sgd optimizer, centered
      rows and no rate given, where the noise term is ≥ 1.5× the stability cap; W's rate is then lifted at run
      time from the released bound (:func:`learning_rates`), up to ``learning_rate_ceiling``.

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
    if n > sensitivity.MAX_ROWS:
        raise ValueError(f"{n} rows: the exact sums a released statistic is computed with hold at most "
                         f"{sensitivity.MAX_ROWS} (privlin.sensitivity); fit on a random subset of that size")
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
    sigma_given = p["noise_multiplier"]
    epsilon = p["epsilon"]
    if (epsilon is None) == (sigma_given is None):
        raise ValueError("give epsilon (the noise is calibrated to it) or noise_multiplier (the ε it achieves is "
                         "reported), not both" if epsilon is not None else "give epsilon or noise_multiplier")
    scale = p["scale"]
    if scale is None:
        scale = center and method != "adam1" and sigma_given is None
    if scale and not center:
        raise ValueError("the scaling stage works on privately centered rows: it needs center=True")
    if scale and sigma_given is not None:
        raise ValueError("scale=True calibrates its noise from epsilon; with noise_multiplier given use scale=False")
    acct = p["accountant"] or ("gdp" if q >= 1.0 else "pld")
    if acct == "gdp" and q < 1.0:
        raise ValueError("accountant='gdp' is exact only for full-batch methods; use 'pld' or 'rdp' for minibatch")
    center_share = DEFAULT_CENTER_SHARE if p["center_share"] is None else float(p["center_share"])
    scale_share = DEFAULT_SCALE_SHARE if p["scale_share"] is None else float(p["scale_share"])
    shares = {"center": center_share} if center else {}
    mdim = dim
    if scale and epsilon is not None:
        radial = p["radial"]
        if radial is None:
            radial = _radius_pays(float(epsilon), float(p["delta"]), n, relation)
        stage = _scale_releases(float(epsilon), float(p["delta"]), scale_share, n, dim + int(radial), relation)
        if radial and "scale" in stage:
            shares["radius"], mdim = RADIUS_SHARE, dim + 1
        elif p["radial"]:
            raise ValueError("radial=True needs the scaling stage, which this budget cannot resolve at this N")
        shares.update(stage)
    elif p["radial"]:
        raise ValueError("radial=True needs the scaling stage (it weighs the radial coordinate): scale=True "
                         "(or None) and epsilon given")
    recenter = p["recenter"]
    if recenter and (not center or sigma_given is not None or p["secure_mode"]):
        raise ValueError("recenter=True needs center=True and epsilon (its noise is calibrated from it), and is not "
                         "made in secure_mode")
    if recenter is None:
        recenter = ("scale" in shares and not p["secure_mode"] and not math.isinf(epsilon)
                    and preprocess.recenter_rounds(_release_sigma(center_share, accounting.gdp_mu_for(
                        float(epsilon), float(p["delta"])), relation), n, mdim, float(p["clip"])) > 0)
    if recenter:
        shares["recenter"] = RECENTER_SHARE
    loss = p["loss"] or ("sigmoid" if method == "adam1" else "softmax")
    optimizer = "sgd" if method == "sgd" else ("adam" if method == "adam1" else p["optimizer"])
    fit_intercept = (method != "adam1") if p["fit_intercept"] is None else bool(p["fit_intercept"])
    clip, momentum = float(p["clip"]), float(p["momentum"])
    if (center and epsilon is not None and p["learning_rate"] is None and optimizer == "sgd"
            and _curvature_pays(float(epsilon), float(p["delta"]), shares, n, mdim, steps=steps, q=q,
                                momentum=momentum, clip=clip, fit_intercept=fit_intercept, relation=relation)):
        shares["curvature"] = CURVATURE_SHARE
    if sum(shares.values()) >= 1.0:
        raise ValueError(f"center_share + scale_share must leave the training steps a share of the budget; "
                         f"got {shares}")

    sig = dict.fromkeys(("center", "scale", "whiten", "curvature", "radius", "recenter"), math.inf)
    if sigma_given is not None:
        sigma = float(sigma_given)
        if center:
            if p["center_noise_multiplier"] is None:
                raise ValueError("with noise_multiplier given, give center_noise_multiplier too (or center=False)")
            sig["center"] = float(p["center_noise_multiplier"])
    elif math.isinf(epsilon):
        sigma = 0.0
        sig.update(dict.fromkeys(shares, 0.0))  # the non-private baseline: exact statistics
    else:
        sigma, got = _calibrate(float(epsilon), float(p["delta"]), steps=steps, q=q, shares=shares,
                                accountant=acct, relation=relation)
        sig.update(got)

    lr, ceiling = p["learning_rate"], math.nan
    if lr is None:
        lr = default_learning_rate(method, optimizer, sigma, q * n, steps=steps, momentum=momentum,
                                   clip=clip, fit_intercept=fit_intercept)
        if "curvature" in shares:
            ceiling = _noise_rate(sigma, q * n, steps=steps, momentum=momentum, clip=clip)
    plan = Plan(method=method, epsilon=math.inf, delta=float(p["delta"]), neighbouring=relation,
                accountant="none" if sigma == 0 else acct, n=n, dim=dim, n_classes=k, steps=steps, sample_rate=q,
                sigma=sigma, sigma_center=sig["center"], learning_rate=float(lr), clip=clip,
                normalize=bool(p["normalize"]), loss=loss, bias_init=-10.0 if loss == "sigmoid" else 0.0,
                fit_intercept=fit_intercept, optimizer=optimizer, momentum=momentum,
                secure_mode=bool(p["secure_mode"]), sigma_scale=sig["scale"], sigma_whiten=sig["whiten"],
                sigma_curvature=sig["curvature"], learning_rate_ceiling=float(ceiling), sigma_radius=sig["radius"],
                center_stages=1 if p["secure_mode"] else preprocess.center_stages(sig["center"], n, mdim, clip),
                sigma_recenter=sig["recenter"], recenter_rounds=preprocess.RECENTER_ROUNDS if recenter else 0)
    if plan.private:
        eps = accounting.event_epsilon(plan.dp_event(), plan.delta, accountant=acct, neighbouring=relation)
        plan = dataclasses.replace(plan, epsilon=eps)
    return plan


def _scale_releases(epsilon, delta, share, n, dim, relation) -> dict:
    """The scaling stage's releases and their shares of μ²: ``{"scale": s/2, "whiten": s/2}``, ``{"scale": s}``
    (whitening cannot resolve two directions, or costs too much) or ``{}`` (not even the moments can).

    Decided before calibration from the GDP view of the budget (a release with share s of μ² has multiplier
    1/(√s·μ), sensitivity doubled under ``replace_one``): public facts only, the same for every accountant.
    """
    if math.isinf(epsilon):
        return {"scale": share / 2, "whiten": share / 2} if scaling.whitening_resolves(n, dim, 0.0) else {"scale": share}
    mu = accounting.gdp_mu_for(epsilon, delta)

    def sigma_of(s):
        return _release_sigma(s, mu, relation)

    if scaling.whitening_resolves(n, dim, sigma_of(share / 2)) and scaling.moments_resolve(n, dim, sigma_of(share / 2)):
        return {"scale": share / 2, "whiten": share / 2}
    if scaling.moments_resolve(n, dim, sigma_of(share)):
        return {"scale": share}
    return {}


def _radius_pays(epsilon, delta, n, relation) -> bool:
    """Whether to buy the row-norm release (:data:`RADIUS_SHARE` of μ²): where it can find a typical norm
    (:func:`privlin.radius.resolves`; decided, like :func:`_scale_releases`, from the GDP view of the budget)."""
    if math.isinf(epsilon):
        return True
    return radius.resolves(n, _release_sigma(RADIUS_SHARE, accounting.gdp_mu_for(epsilon, delta), relation))


def _curvature_pays(epsilon, delta, shares, n, dim, *, steps, q, momentum, clip, fit_intercept, relation) -> bool:
    """Whether to buy the curvature release (:data:`CURVATURE_SHARE` of μ²): its pass is affordable (the bounds of
    whitening), the noise term is at least 1.5× the stability cap (so a flatter curvature could lift the rate by
    that much: at 1.0× the k=100 mixture lost 0.2 points for nothing, at 1.9× it gained 2.0; BENCHMARKS.md), and
    the release can show a curvature at least 1.5× below the worst case.  Decided, like
    :func:`_scale_releases`, from the GDP view of the budget before calibration: public facts only."""
    if not scaling.second_moment_affordable(n, dim):
        return False
    if math.isinf(epsilon):
        return True
    mu = accounting.gdp_mu_for(epsilon, delta)
    rest = 1.0 - sum(shares.values()) - CURVATURE_SHARE
    if rest <= 0:
        return False
    sigma = _release_sigma(rest, mu, relation) * q * math.sqrt(steps)  # T steps sharing the rest of μ²
    if _noise_rate(sigma, q * n, steps=steps, momentum=momentum, clip=clip) < 1.5 * _joint_cap(momentum, clip, fit_intercept):
        return False
    std = _release_sigma(CURVATURE_SHARE, mu, relation) * scaling.curvature_sensitivity(n, dim)
    flattest = float(scaling.curvature_bound(n / dim, n, dim, std))  # the bound if the rows were isotropic
    return 1.5 * flattest < 1.0


def _release_sigma(share, mu, relation) -> float:
    """σ of a Gaussian release spending ``share`` of the GDP budget μ² (1/σ² = share·μ², sensitivity doubled under
    ``replace_one``): the view in which the plan decides which releases to make."""
    return accounting.sensitivity_factor(relation) / (math.sqrt(share) * mu)


def _calibrate(epsilon, delta, *, steps, q, shares, accountant, relation) -> tuple[float, dict]:
    """σ of the training steps and ``{name: σ}`` of the one-off releases, release ``name`` spending ``shares[name]``
    of the budget; never overshoots ε.

    Full batch under GDP: μ² = Σ_r 1/σ_r² + T/σ², exact (Dong, Roth & Su 2019, Cor. 3.3), with 1/σ_r² = s_r·μ².
    Poisson-sampled steps: each release gets the share of μ² it would get if the T steps were Gaussian with
    μ² ≈ q²T/σ² (CLT, Bu et al.); the accountant then checks the whole plan exactly.
    """
    rest = 1.0 - sum(shares.values())
    ratios = {name: math.sqrt(rest / (s * steps * q * q)) for name, s in shares.items()}
    sigma = accounting.calibrate_noise(epsilon, delta, steps=steps, sample_rate=q, accountant=accountant,
                                       neighbouring=relation, extra_ratios=list(ratios.values()))
    return sigma, {name: r * sigma for name, r in ratios.items()}


def default_learning_rate(method: str, optimizer: str, sigma: float, batch: float, *, steps: int = 100,
                          momentum: float = 0.9, clip: float = 1.0, fit_intercept: bool = False) -> float:
    """The learning rate when none is given, from public facts: σ, the expected batch B = q·N, T, β, C.

    SGD with heavy-ball momentum β (``sgd``, ``minibatch`` with optimizer ``"sgd"``)::

        lr = min( ρ·(1−β)·B / (σ·√T·C²) ,  4(1+β) / (C² + [intercept]) )        ρ = LOGIT_NOISE = 0.8

    * Noise term.  Each step adds N(0, (σC/B)²) per weight; with momentum the weights move lr/(1−β) times that,
      and after T steps the noise is a random walk of standard deviation ρ = lr·σ·√T / ((1−β)·B) per weight, i.e.
      ρ·C in the logit of a row at norm C, whatever d.  For a Lipschitz convex loss the step size of noisy
      gradient descent that balances optimization against noise makes this accumulated noise equal to the size
      of one coordinate of the solution, ‖W*‖/√(dk) (Bassily, Smith & Thakurta 2014, §5), independently of N and
      ε.  The rule fixes that size at ρ = 0.8, the value of DP-RandP's tuned probes (seed 004, Table 22:
      lr·σ/N ≈ 0.008 at T=100 for every ε from 0.1 to 8 — the rule gives exactly that table at its T).  How it
      holds on data it was not set on: BENCHMARKS.md, "privlin defaults on unseen data" (it is weakest at small
      N·μ, where a smaller rate, closer to the first gradient's direction, does better).  At a fixed ρ, the total
      step ``lr·T/(1−β) = ρ·B·√T/σ = ρ·N·μ_train`` (full batch) is what moves the model, so more steps at a
      smaller rate should give about the same model: T stays DP-RandP's 100, ten momentum time constants.
      Measured, T still matters where N ≈ d: fewer steps (T=10, whose momentum never builds up: an earlier stop)
      gain 2–4 points on 2048–4096-d mixtures of 3000–5000 rows at ε ≤ 1, and lose up to 14 on wine (124 rows,
      ε=0.5); no rule for T from (N, d, σ) has been found that wins on both, so T is not derived.  More steps
      (T=300, BENCHMARKS.md "Do more steps pay?") move the table's sets −1.0…+2.9 points where the noise sets the
      rate, and +0.1 on the N=200 000 mixture, where the cap does, at 3× the time.
    * Stability term.  With rows at norm C and an intercept feature 1, the mean softmax (or sigmoid) loss has a
      Hessian bounded by L = (C² + 1)/2 (C²/2 without intercept; the logits' Hessian is ≼ ½I); heavy ball is
      stable for lr·L < 2(1+β) (Polyak 1964).  It binds at large N·μ (little noise), where the noise rule alone would
      take steps that diverge; without noise (ε = ∞) it is the learning rate.
    * Clip C.  Rows are normalized to norm C and gradients clipped at C; the per-example gradient x·rᵀ has norm
      C·‖r‖ ≤ C√2, so C rescales signal and noise alike (logits move by lr·C² per unit step): the rule is written
      for C = 1 (the estimator's default) and divides by C², so any C trains the same model in logits (without
      an intercept; the intercept's feature is 1 whatever C).  At C = 1 with the intercept the per-example
      gradient norm at zero init, √(2(1 − 1/k)), is ≥ 1: every example is clipped from the first step
      (normalized per-example gradients, the regime Bu et al. 2023 recommend: no clip to tune).

    * Curvature.  The stability term assumes the worst case, rows all along one direction (second moment of top
      eigenvalue 1).  Centered, whitened rows are far flatter (≈ 1/d), and at large N·μ the cap, not the noise,
      then sets the rate and T=100 steps do not converge.  Where that is so, the plan buys a release of the top
      eigenvalue (:func:`privlin.scaling.release_curvature`) and :func:`learning_rates` lifts W's cap from it, up
      to this rule's noise term.

    adam1 and Adam/LAMB: 1e-3 (Mehta et al. App. F.1; Adam's step does not scale with the gradient).
    """
    if method == "adam1" or optimizer != "sgd":
        return ADAM_LR
    return min(_noise_rate(sigma, batch, steps=steps, momentum=momentum, clip=clip),
               _joint_cap(momentum, clip, fit_intercept))


def _joint_cap(momentum, clip, fit_intercept) -> float:
    """The stability term: one rate for W and b, worst-case rows (:func:`stability_caps` at curvature 1)."""
    return 4.0 * (1.0 + momentum) / (clip**2 + (1.0 if fit_intercept else 0.0))


def _noise_rate(sigma, batch, *, steps, momentum, clip) -> float:
    """The noise term of :func:`default_learning_rate` (inf without noise)."""
    if sigma == 0.0:
        return math.inf
    return LOGIT_NOISE * (1.0 - momentum) * batch / (sigma * math.sqrt(steps) * clip**2)


def stability_caps(curvature, *, momentum: float, clip: float, fit_intercept: bool):
    """(W's, b's) largest stable heavy-ball rates on rows at norm C whose directions' second moment has top
    eigenvalue ``curvature`` = λ ≤ 1 (a scalar; may be traced).

    The mean loss's Hessian is ≼ ½·E[(Cx, 1)(Cx, 1)ᵀ] (logits' Hessian ≼ ½I), stable for lr·L < 2(1+β) (Polyak 1964).
    One rate for all: L ≤ (C²λ + 1)/2, so λ=1 gives the joint cap 4(1+β)/(C² + 1).  A rate per block:
    [[A, B], [Bᵀ, D]] ≼ 2·diag(A, D) for a PSD matrix, so W at 2(1+β)/(C²λ) and b at 2(1+β) are stable together,
    whatever the rows' mean; taken where it beats the joint cap (λ well below 1).  Without an intercept
    W's cap is 4(1+β)/(C²λ).
    """
    gain = 2.0 * (1.0 + momentum)  # lr·L below this is stable
    joint = _joint_cap(momentum, clip, fit_intercept)
    if not fit_intercept:
        return 2.0 * gain / (clip**2 * curvature), joint
    block = gain / (clip**2 * curvature)
    return jnp.where(block > joint, block, joint), jnp.where(block > joint, gain, joint)


def learning_rates(ceiling, curvature, *, momentum: float, clip: float, fit_intercept: bool):
    """(W's, b's) learning rate of a plan with the curvature release, from the released ``curvature`` (an upper
    bound on the top eigenvalue of the rows' second moment; post-processing): each stability cap of
    :func:`stability_caps`, at most ``ceiling`` (the noise term).  Where the release shows no flatness the caps
    are the joint one and both rates are the plan's ``learning_rate``."""
    cap_w, cap_b = stability_caps(curvature, momentum=momentum, clip=clip, fit_intercept=fit_intercept)
    return jnp.minimum(ceiling, cap_w), jnp.minimum(ceiling, cap_b)
