"""The private plan: everything about one private fit that is decided before any row is read.

Why one place: a default learning rate, a σ split or a bias init computed in two modules drifts (ours did: the
sweep and the estimator trained different pipelines at the same ε).  :func:`make_plan` is the only function that
turns the estimator's parameters and the public facts (N, dimension, number of classes) into a :class:`Plan`, in
steps read apart — validate → resolve defaults → choose releases → calibrate → build.  The plan holds its
*chain*: the ordered ``(release, σ)`` of every private release before training (:mod:`privlin.releases`), from
which the event, ε, the secure-mode table, the ledger entry and the report's notes are derived.

A plan is public by construction: it depends on the parameters and on N, d, k only.
"""
from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np
from dp_accounting import dp_event as _ev

from . import accounting, noise, releases, sensitivity, train
from .defaults import (ADAM1_BIAS_INIT, ADAM_LR, CURVATURE_SHARE, DEFAULT_CENTER_SHARE, DEFAULT_EPSILON,
                       DEFAULT_SCALE_SHARE, DEFAULT_STEPS, LOGIT_NOISE, MAX_STEPS, METHODS, PARAMS, RADIUS_SHARE,
                       RECENTER_SHARE)
from .releases import Release
from .releases.base import row_map
from .releases.rates import default_learning_rate, learning_rates, noise_rate, stability_caps
from .spelling import check_method

__all__ = ["Plan", "Static", "make_plan", "validate", "resolve", "choose", "calibrate", "build", "Settings",
           "Resolved", "Choice", "Calibration", "class_weights", "default_learning_rate", "METHODS", "DEFAULT_EPSILON",
           "DEFAULT_STEPS", "LOGIT_NOISE", "DEFAULT_CENTER_SHARE", "DEFAULT_SCALE_SHARE", "CURVATURE_SHARE",
           "RADIUS_SHARE", "RECENTER_SHARE", "ADAM_LR", "stability_caps", "learning_rates"]


#: The name in ``make_plan``'s ``given`` (and the key of the values given to a fit) of labelled public rows whose fit
#: starts the DP steps (:attr:`Plan.public_start`, :func:`privlin.chain.public_start`): not a release.
START = "public start"

#: The training settings a compiled fit specializes on (with the chain's σ ratios: :class:`Static`).
STATIC_SETTINGS = ("method", "steps", "sample_rate", "clip", "normalize", "loss", "bias_init", "fit_intercept",
                   "optimizer", "momentum", "class_weight", "public_clip", "average")


class Static(collections.namedtuple("Static", (*STATIC_SETTINGS, "chain", "given"), defaults=((),))):
    """What a compiled fit specializes on (hashable): the plan's :data:`STATIC_SETTINGS`, ``chain``: each
    release's ``(release, σ/σ_ref)``, a fixed ratio to the plan's reference σ (:attr:`Plan.reference_sigma`), the
    same at every ε, and ``given``: :attr:`Plan.given`.  Shapes come from the arrays, and ε, σ, the learning rate
    and the key are arguments, so one program serves an ε grid or CV folds."""

    __slots__ = ()

    def release(self, name: str):
        """``(release, ratio)`` of the chain's release ``name``, or None where it is not made."""
        return next(((r, x) for r, x in self.chain if r.name == name), None)

    @property
    def centered(self) -> bool:
        """Whether the rows are centered: by a released centre, or a given (public) one."""
        return self.release("center") is not None or any(g.name == "center" for g, _ in self.given)


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
    chain : tuple of (Release, float)
        The releases made before training, in the order they run, each with its noise multiplier σ (0: the
        non-private baseline's exact statistic).  ``sigma_<name>`` reads one (inf: not made).
    given : tuple of (Release, int)
        Releases whose values the fit is given (public statistics: no share, no σ, no event, not charged), each
        with the number of the chain's releases that run before it.
    public_start : bool
        The DP steps start from a non-private fit on labelled public rows (:func:`privlin.chain.public_start`)
        rather than from zero: no share, no σ, no event (the steps' noise does not depend on where they start).
    public_clip : bool
        With ``public_start``: every private gradient is multiplied, before the clip at C, by C over the public
        rows' held-out gradient norm at the start (:func:`privlin.chain.clip_gain`); σ, C and the event unchanged.
    average : float or "ema"
        The DP steps return the mean of their iterates (:func:`privlin.train.average_weights`; 0: the last
        iterate, also where that rule averages nothing): post-processing of released iterates, σ and the event
        unchanged; 0 for ``adam1`` (one step).
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
    learning_rate: float
    clip: float
    normalize: bool
    loss: str
    bias_init: float
    fit_intercept: bool
    optimizer: str
    momentum: float
    secure_mode: bool = False
    learning_rate_ceiling: float = math.nan
    chain: tuple = ()
    class_weight: tuple | None = None
    given: tuple = ()
    public_start: bool = False
    public_clip: bool = False
    average: object = 0.0

    # ---- the chain, read by name
    def release(self, name: str) -> Release | None:
        return next((r for r, _ in self.chain if r.name == name), None)

    def sigma_of(self, name: str) -> float:
        """σ of release ``name`` (inf: not made)."""
        return next((s for r, s in self.chain if r.name == name), math.inf)

    sigma_center = property(lambda self: self.sigma_of("center"))
    sigma_scale = property(lambda self: self.sigma_of("scale"))
    sigma_whiten = property(lambda self: self.sigma_of("whiten"))
    sigma_curvature = property(lambda self: self.sigma_of("curvature"))
    sigma_radius = property(lambda self: self.sigma_of("radius"))
    sigma_recenter = property(lambda self: self.sigma_of("recenter"))

    @property
    def center_stages(self) -> int:
        """1, or 2 where a refining pass pays (:func:`privlin.releases.preprocess.center_stages`, from public facts)."""
        r = self.release("center")
        return 1 if r is None else r.stages

    @property
    def recenter_rounds(self) -> int:
        r = self.release("recenter")
        return 0 if r is None else r.rounds

    @property
    def private(self) -> bool:
        return self.sigma > 0

    centered = property(lambda self: self.release("center") is not None)
    recentered = property(lambda self: self.release("recenter") is not None)
    scaled = property(lambda self: self.release("scale") is not None)
    whitened = property(lambda self: self.release("whiten") is not None)
    radial = property(lambda self: any(r.name == "radius" for r in self.ran))  # released or given
    curved = property(lambda self: any(r.name == "curvature" for r in self.ran))  # released or given

    def row_map(self, values: Mapping[str, Any]):
        """The row map that the released ``values`` (by release name) define: how the fitted model maps rows
        (:func:`privlin.releases.base.row_map`, in the order the releases ran).  Every release that ran must have
        its value there (or in the value of the release its ``folded_into`` names)."""
        if missing := [r.name for r in self.ran if r.name not in values and r.folded_into not in values]:
            raise ValueError(f"the released values of {missing} are missing: the model maps rows by them")
        return row_map(self.ran, values)

    @property
    def ran(self) -> tuple:
        """Every release whose value the fit uses, in the order they run: the chain's, and the given ones."""
        return tuple(x for i, (r, _) in enumerate((*self.chain, (None, None)))
                     for x in (*(g for g, before in self.given if before == i), r) if x is not None)

    @property
    def model_dim(self) -> int:
        """Inputs of the model: the rows' dimension, plus what the releases add (the radial coordinate), or the
        rank of a given public subspace (:mod:`privlin.releases.project`)."""
        dim = self.dim
        for r in self.ran:
            dim = r.model_dim_after(dim)
        return dim

    @property
    def projected(self) -> bool:
        """Whether the rows are projected onto a given public subspace (:mod:`privlin.releases.project`)."""
        return any(r.name == releases.PROJECT.name for r in self.ran)

    # ---- what the chain implies
    def noise_multipliers(self) -> dict:
        """σ of each mechanism that runs, in the order they run, as the report shows them."""
        out = {r.name: s for r, s in self.chain}
        out["step"] = self.sigma
        return out

    def dp_event(self) -> _ev.DpEvent:
        """The dp-accounting event of the whole plan: every release's Gaussians as they run, then the steps."""
        if not self.private:
            return _ev.NonPrivateDpEvent()
        extra = [s for r, sigma in self.chain for s in r.events(sigma)]
        return accounting.dp_event(self.sigma, steps=self.steps, sample_rate=self.sample_rate,
                                   extra_noise_multipliers=extra)

    def budget_shares(self) -> dict:
        """Share of the GDP budget μ² = Σ 1/σ² (Poisson steps: q²T/σ², their CLT value) of each mechanism."""
        if not self.private:
            return {}
        parts = {r.name: 1.0 / s**2 for r, s in self.chain}
        parts["step"] = self.steps * self.sample_rate**2 / self.sigma**2
        total = sum(parts.values())
        return {name: v / total for name, v in parts.items()}

    def secure_table(self) -> dict:
        """``{mechanism: (noise std, L2 sensitivity, public bound on every entry)}`` as secure mode draws them
        (``secure_noise.check_plan`` refuses impossible ones before the charge)."""
        out = {r.name: r.secure(self, s) for r, s in self.chain}
        out["step"] = (self.sigma * self.clip, self.clip, self.n * self.clip)
        return out

    def ledger_params(self, seeded: bool) -> dict:
        """What a ledger entry keeps about the fit (public plan facts; never the key): σ of every release
        privlin knows (None where not made) and of any added one."""
        sig = {f"sigma_{name}": None for name in releases.BUILT_IN}
        sig.update({r.ledger_key: s for r, s in self.chain})
        if self.given:  # their values were given (public statistics), not released: no σ
            sig["given"] = [r.name for r, _ in self.given]
        if self.public_start:
            sig["public_start"] = True
            sig["public_clip"] = self.public_clip
        if self.averaged:
            sig["average"] = self.average
        return {"steps": self.steps, "sample_rate": self.sample_rate, "sigma": self.sigma, **sig,
                "accountant": self.accountant, "n": self.n, "seeded": bool(seeded)}

    def notes(self, values: Mapping[str, Any]) -> list[str]:
        """The releases' report notes, in chain order, given their released ``values`` by name, then the
        iterate averaging's where the steps average."""
        notes = [note for r, s in self.chain if (note := r.note(self, s, values.get(r.name)))]
        if self.averaged:
            how = ("an exponential moving average of the iterates" if self.average == "ema" else
                   f"the mean of the iterates of the last {100 * float(self.average):.3g}% of the steps")
            notes.append(f"weights returned: {how} (post-processing of the noisy steps: σ and ε unchanged)")
        return notes

    @property
    def averaged(self) -> bool:
        """Whether the returned weights are a mean of the DP steps' iterates (:attr:`average`)."""
        return train.average_weights(self.steps, self.average) is not None

    @property
    def center_share(self) -> float:
        """Share of the GDP budget μ² spent on centering (0 without centering)."""
        return self.budget_shares().get("center", 0.0)

    @property
    def scale_share(self) -> float:
        """Share of the GDP budget μ² spent on the scaling stage (moments and whitening; 0 without it)."""
        shares = self.budget_shares()
        return shares.get("scale", 0.0) + shares.get("whiten", 0.0)

    @property
    def reference_sigma(self) -> float:
        """The σ every release's is a fixed multiple of in :meth:`static` (the centering's, else the steps'; 1
        where that is 0, the non-private baseline, whose releases are all at 0)."""
        ref = self.sigma_center if self.centered else self.sigma
        return ref if ref > 0 else 1.0

    def static(self) -> Static:
        """What a compiled trainer specializes on; plans with equal ``static()`` run vmapped together.

        Each release's σ/σ_ref is rounded up to float32 (:func:`privlin.noise.sigma_float32`), the precision the
        compiled fit multiplies the traced σ_ref by, so the σ it uses is never below the planned one: the float64
        ratio moves in its last bits from one ε to the next, which would otherwise compile a new program per ε."""
        ref = self.reference_sigma
        return Static(*(getattr(self, name) for name in STATIC_SETTINGS),
                      chain=tuple((r, float(noise.sigma_float32(s / ref))) for r, s in self.chain), given=self.given)

    def learning_rates_after(self, curvature) -> tuple[float, float]:
        """(W's, b's) learning rate the fit ran with, given its released curvature bound (None: not released)."""
        if curvature is None or not self.curved:
            return self.learning_rate, self.learning_rate
        w, b = learning_rates(self.learning_rate_ceiling, float(curvature), momentum=self.momentum, clip=self.clip,
                              fit_intercept=self.fit_intercept)
        return float(w), float(b)


def class_weights(class_weight, classes, k: int) -> tuple | None:
    """The public per-class weights in the order of ``classes`` (None where every weight is 1).

    ``class_weight``: None, ``{class: weight}`` (a class not named: 1) or k weights in class order; every weight in
    (0, 1]: a row's contribution is scaled by its class's weight before the sums that bound it, so one row still
    moves a released sum by at most the clip.  ``"balanced"`` is refused: it reads the private class counts.
    With no class list yet (``k`` = 0: it is read from the labels later) a mapping is checked and left unresolved.
    """
    if class_weight is None:
        return None
    if isinstance(class_weight, str):
        raise ValueError(f"class_weight={class_weight!r} weighs classes by their private counts: give public "
                         "weights, {class: weight} with every weight in (0, 1]")
    if isinstance(class_weight, Mapping):
        weights = dict(class_weight)
        _check_weights(weights.values())
        if classes is None:
            if k:
                raise ValueError("class_weight as {class: weight} needs the public class list (classes=...)")
            return None
        names = np.asarray(classes).tolist()
        if bad := [c for c in weights if c not in set(names)]:
            raise ValueError(f"class_weight names {bad}, not in the class list {names[:10]}")
        out = tuple(float(weights.get(c, 1.0)) for c in names)
    else:
        out = tuple(float(w) for w in np.ravel(np.asarray(class_weight, dtype=float)))
        _check_weights(out)
        if k and len(out) != k:
            raise ValueError(f"class_weight has {len(out)} weights for {k} classes")
    return None if all(w == 1.0 for w in out) else out


def _check_weights(weights) -> None:
    bad = [w for w in weights if not (isinstance(w, (int, float, np.integer, np.floating)) and 0 < float(w) <= 1)]
    if bad:
        raise ValueError(f"class_weight values must be numbers in (0, 1], got {bad[:3]}: a weight above 1 would let "
                         "one row move a sum by more than the clip the noise is calibrated to (divide the weights "
                         "by the largest)")


# ----------------------------------------------------------------------------- make_plan, in its steps

def make_plan(params: Mapping[str, Any], *, n: int, dim: int, n_classes: int | None, classes=None,
              given: Sequence[str] = ()) -> Plan:
    """The plan of ``DPLinearClassifier(**params)`` on N = ``n`` rows of dimension ``dim`` with ``n_classes``.

    ``params`` are the estimator's parameters (missing keys take :data:`privlin.defaults.PARAMS`).  Only public
    facts enter.  ``n_classes=None``: not known yet (the class list will be read from the labels after the
    charge); the noise, and so the event charged, never depend on it.  ``given``: names of registered releases
    whose values are given to the fit rather than released (public statistics computed elsewhere): they take no
    share, no σ and no event, are not charged, and the fit uses the values it is given for them exactly as if
    released (:attr:`Plan.given`); and :data:`START` where labelled public rows are given to start the DP steps
    (``public_start``, :attr:`Plan.public_start`).

    The defaults (every ``None`` parameter), all from public facts:

    * preprocessing: normalize, privately center (``center_share`` = 5% of μ²; in two stages where the first's
      expected error is between 1% and a third of the row norm, :func:`privlin.releases.preprocess.center_stages`), then
      the scaling stage of :mod:`privlin.releases.scaling` (``scale_share`` = 15% of μ², for ``sgd``/``minibatch``;
      ``adam1`` stays the one-pass method of Mehta et al.): per-dimension moments, and whitening where it can
      resolve two or more directions; a release that cannot be told from its own noise is not made and its
      share goes to training.  With the scaling stage, where the release can find it
      (:func:`privlin.releases.stage.radius_pays`), a typical row norm (``radial``; :data:`RADIUS_SHARE`) and each row's
      log-norm as one more coordinate.
    * ``recenter``: with the scaling stage, where the centering's expected error is ≥ a tenth of the row norm
      (:func:`privlin.releases.preprocess.recenter_rounds`), two re-centering rounds before it (:data:`RECENTER_SHARE`).
      Never in secure mode.
    * ``fit_intercept``: True for ``sgd``/``minibatch`` — centered rows carry no constant direction, so without an
      intercept a model cannot express unequal class frequencies; ``adam1`` keeps Mehta et al.'s frozen bias −10.
    * ``steps``, ``learning_rate``: :data:`DEFAULT_STEPS`, :func:`default_learning_rate`.
    * the curvature release (:data:`CURVATURE_SHARE`, :func:`privlin.releases.curvature.curvature_pays`): with the sgd
      optimizer, centered rows and no rate given, where the noise term is well above the stability cap; W's rate is then
      lifted at run time from the released bound (:func:`learning_rates`), up to ``learning_rate_ceiling``.
    * every release, built-in or added (:data:`privlin.releases.REGISTRY`), asks for its own share from public
      facts (:meth:`~privlin.releases.base.Release.share`).

    Raises
    ------
    ValueError
        A combination no plan can run (adam1 with several steps, GDP for a subsampled plan, ...).
    """
    settings = validate(params, n, dim, n_classes, classes)
    resolved = resolve(settings)
    choice = choose(resolved, tuple(g for g in given if g != START))
    return _public_start(build(resolved, choice, calibrate(resolved, choice)), settings, given)


def _public_start(plan: Plan, settings: Settings, given) -> Plan:
    """``plan`` with the DP steps' start from labelled public rows (``public_start``) and, with it, ``public_clip``;
    refused where it cannot run.  Neither changes σ or the event."""
    if not settings.p["public_start"]:
        return plan
    if settings.method == "adam1":
        raise ValueError("public_start starts the DP steps of sgd and minibatch; adam1 is one step from zero")
    if START not in given and settings.k:
        raise ValueError("public_start=True needs labelled public rows: public=(X_pub, y_pub), or a store split "
                         "(its labels are read)")
    return dataclasses.replace(plan, public_start=True, public_clip=bool(settings.p["public_clip"]))


@dataclasses.dataclass(frozen=True)
class Settings:
    """Step 1, :func:`validate`: the parameters (defaults filled in) and the public facts, checked."""

    p: Mapping[str, Any]
    n: int
    dim: int
    k: int
    method: str
    steps: int
    relation: str
    center: bool
    sigma_given: Any
    epsilon: Any
    delta: float
    class_weight: tuple | None


@dataclasses.dataclass(frozen=True)
class Resolved:
    """Step 2, :func:`resolve`: every default that does not depend on which releases are bought."""

    settings: Settings
    q: float
    scale: bool
    accountant: str
    center_share: float
    scale_share: float
    loss: str
    optimizer: str
    fit_intercept: bool
    clip: float
    momentum: float
    secure: bool


@dataclasses.dataclass(frozen=True)
class Choice:
    """Step 3, :func:`choose`: ``shares``, ``(release, share of μ²)`` of every release bought, in the order
    decided; ``facts``, what they were decided from (``model_dim`` final); ``given``, the releases whose values
    are given, each with the number of bought releases that run before it."""

    shares: tuple
    facts: releases.Facts
    given: tuple = ()

    def share_of(self) -> dict:
        return {r.name: share for r, share in self.shares}


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Step 4, :func:`calibrate`: σ of the training steps and ``sigmas``, ``{name: σ}`` of every release bought."""

    sigma: float
    sigmas: Mapping[str, float]


def validate(params, n, dim, n_classes, classes=None) -> Settings:
    """Step 1: the parameters (defaults filled in) and the public facts, refused where no plan can run them."""
    p = {**PARAMS, **dict(params)}
    n, dim, k = int(n), int(dim), (0 if n_classes is None else int(n_classes))
    if n < 1:
        raise ValueError("no rows to fit on")
    if n > sensitivity.MAX_ROWS:
        raise ValueError(f"{n} rows: the exact sums a released statistic is computed with hold at most "
                         f"{sensitivity.MAX_ROWS} (privlin.sensitivity); fit on a random subset of that size")
    if n_classes is not None and k < 2:
        raise ValueError(f"a classifier needs at least 2 classes; got {k}")
    method = p["method"]
    check_method(method)
    steps = int(p["steps"] or DEFAULT_STEPS[method])
    if method == "adam1" and steps != 1:
        raise ValueError(f"method='adam1' is a single step; got steps={steps} (use method='sgd' or 'minibatch')")
    if steps > MAX_STEPS:
        raise ValueError(f"steps={steps} is more than privlin runs (privlin.defaults.MAX_STEPS = {MAX_STEPS}): "
                         f"every step's key is drawn before training")
    relation = accounting.relation_name(p["neighbouring"])
    if relation == "add_or_remove_one":
        raise ValueError("privlin's trainers publish N (they divide by it and report it), which tells D from "
                         "D ∪ {x}: use neighbouring='replace_special' (zero-out: one example replaced by a null "
                         "one, N public), which dp-accounting accounts exactly as add/remove-one")
    center = bool(p["center"]) or p["center_noise_multiplier"] is not None
    if center and not p["normalize"]:
        raise ValueError("private centering needs normalize=True (rows of norm `clip` bound the mean's sensitivity; "
                         "center=True is the default): for input-space coef_ pass normalize=False, center=False")
    train.average_weights(steps, p["average"])  # refused here, before any charge, where it is no averaging rule
    sigma_given, epsilon = p["noise_multiplier"], p["epsilon"]
    if (epsilon is None) == (sigma_given is None):
        raise ValueError("give epsilon (the noise is calibrated to it) or noise_multiplier (the ε it achieves is "
                         "reported), not both" if epsilon is not None else "give epsilon or noise_multiplier")
    return Settings(p=p, n=n, dim=dim, k=k, method=method, steps=steps, relation=relation, center=center,
                    sigma_given=sigma_given, epsilon=epsilon, delta=float(p["delta"]),
                    class_weight=class_weights(p["class_weight"], classes, k))


def resolve(s: Settings) -> Resolved:
    """Step 2: every ``None`` parameter that does not depend on which releases are bought."""
    p, method = s.p, s.method
    q = 1.0 if method != "minibatch" else min(1.0, p["batch_size"] / s.n)
    scale = p["scale"]
    if scale is None:
        scale = s.center and method != "adam1" and s.sigma_given is None
    if scale and not s.center:
        raise ValueError("the scaling stage works on privately centered rows: it needs center=True")
    if scale and s.sigma_given is not None:
        raise ValueError("scale=True calibrates its noise from epsilon; with noise_multiplier given use scale=False")
    acct = p["accountant"] or ("gdp" if q >= 1.0 else "pld")
    if acct == "gdp" and q < 1.0:
        raise ValueError("accountant='gdp' is exact only for full-batch methods; use 'pld' or 'rdp' for minibatch")
    return Resolved(
        settings=s, q=q, scale=bool(scale), accountant=acct,
        center_share=DEFAULT_CENTER_SHARE if p["center_share"] is None else float(p["center_share"]),
        scale_share=DEFAULT_SCALE_SHARE if p["scale_share"] is None else float(p["scale_share"]),
        loss=p["loss"] or ("sigmoid" if method == "adam1" else "softmax"),
        optimizer="sgd" if method == "sgd" else ("adam" if method == "adam1" else p["optimizer"]),
        fit_intercept=(method != "adam1") if p["fit_intercept"] is None else bool(p["fit_intercept"]),
        clip=float(p["clip"]), momentum=float(p["momentum"]), secure=bool(p["secure_mode"]))


def facts_of(r: Resolved) -> releases.Facts:
    """The public facts every release decides from (:class:`privlin.releases.Facts`), none chosen yet."""
    s = r.settings
    eps = s.epsilon
    mu = math.nan if eps is None else (math.inf if math.isinf(eps) else accounting.gdp_mu_for(float(eps), s.delta))
    return releases.Facts(
        n=s.n, dim=s.dim, clip=r.clip, mu=mu, sensitivity_factor=accounting.sensitivity_factor(s.relation),
        secure_mode=r.secure, epsilon=None if eps is None else float(eps), delta=s.delta, relation=s.relation,
        center=s.center, center_share=r.center_share, scale=r.scale, scale_share=r.scale_share, radial=s.p["radial"],
        recenter=s.p["recenter"], sigma_given=s.sigma_given is not None, steps=s.steps, q=r.q, momentum=r.momentum,
        fit_intercept=r.fit_intercept, optimizer=r.optimizer, learning_rate_given=s.p["learning_rate"] is not None,
        model_dim=s.dim)


def choose(r: Resolved, given: tuple = ()) -> Choice:
    """Step 3: every registered release (:data:`privlin.releases.REGISTRY`) asked, in its order, for its share
    of μ² from public facts (:meth:`~privlin.releases.base.Release.share`), each seeing the ones chosen before
    it; a ``given`` release is not asked (its value comes with the fit)."""
    registered = releases.REGISTRY
    if unknown := sorted(set(given) - {x.name for x in registered}):
        raise ValueError(f"given values of {unknown}: no such release is registered")
    facts, shares = _projected(facts_of(r), r.settings.p, given), []
    for release in registered:
        if release.name in given or (share := float(release.share(facts))) <= 0:
            continue
        if facts.sigma_given and release.sigma_param is None:
            raise ValueError(f"release {release.name!r} asks for a share of the budget, and noise_multiplier was "
                             "given (there is no budget to split): give epsilon")
        shares.append((release, share))
        facts = dataclasses.replace(facts, model_dim=facts.projected or facts.model_dim + release.adds_dims,
                                    chosen=(*facts.chosen, (release.name, share)))
    if sum(share for _, share in shares) >= 1.0:
        raise ValueError(f"center_share + scale_share must leave the training steps a share of the budget; "
                         f"got {dict(facts.chosen)}")
    order = releases.run_order(registered)
    bought = {x.name for x, _ in shares}
    placed = tuple((x.given_as(facts), sum(o.name in bought for o in order[:i])) for i, x in enumerate(order)
                   if x.name in given)
    return Choice(tuple(shares), facts, placed)


def _projected(facts: releases.Facts, p, given) -> releases.Facts:
    """The facts with a given public subspace's rank (``public_rank``, resolved by :mod:`privlin.public`): the
    releases after it and the model work in that many dimensions."""
    if releases.PROJECT.name not in given:
        return facts
    rank = p.get("public_rank")
    if not isinstance(rank, (int, np.integer)) or isinstance(rank, bool) or rank < 1:
        raise ValueError(f"a given public subspace needs public_rank ≥ 1 (privlin.public resolves it); got {rank!r}")
    return dataclasses.replace(facts, projected=int(rank), model_dim=int(rank))


def calibrate(r: Resolved, choice: Choice) -> Calibration:
    """Step 4: σ of the training steps and ``{name: σ}`` of every release bought."""
    s, shares = r.settings, choice.share_of()
    if s.sigma_given is not None:
        missing = [x.sigma_param for x, _ in choice.shares if s.p[x.sigma_param] is None]
        if missing:
            raise ValueError("with noise_multiplier given, give center_noise_multiplier too (or center=False)")
        return Calibration(float(s.sigma_given), {x.name: float(s.p[x.sigma_param]) for x, _ in choice.shares})
    if math.isinf(s.epsilon):
        return Calibration(0.0, dict.fromkeys(shares, 0.0))  # the non-private baseline: exact statistics
    sigma, sig = _calibrate(float(s.epsilon), s.delta, steps=s.steps, q=r.q, shares=shares, accountant=r.accountant,
                            relation=s.relation)
    return Calibration(sigma, sig)


def build(r: Resolved, choice: Choice, cal: Calibration) -> Plan:
    """Step 5: the plan, its chain in run order (each release as it runs at its σ), its learning rate and the ε
    it achieves."""
    s, sigma, sig = r.settings, cal.sigma, cal.sigmas
    lr, ceiling = s.p["learning_rate"], math.nan
    if lr is None:
        lr = default_learning_rate(s.method, r.optimizer, sigma, r.q * s.n, steps=s.steps, momentum=r.momentum,
                                   clip=r.clip, fit_intercept=r.fit_intercept)
        if any(x.name == releases.CURVATURE.name for x, _ in (*choice.shares, *choice.given)):  # released or given
            ceiling = noise_rate(sigma, r.q * s.n, steps=s.steps, momentum=r.momentum, clip=r.clip)
    bought = {x.name: x for x, _ in choice.shares}
    chain = tuple((bought[x.name].build(choice.facts, float(sig[x.name])), float(sig[x.name]))
                  for x in releases.run_order(releases.REGISTRY) if x.name in bought)
    plan = Plan(method=s.method, epsilon=math.inf, delta=s.delta, neighbouring=s.relation,
                accountant="none" if sigma == 0 else r.accountant, n=s.n, dim=s.dim, n_classes=s.k, steps=s.steps,
                sample_rate=r.q, sigma=sigma, learning_rate=float(lr), clip=r.clip,
                normalize=bool(s.p["normalize"]), loss=r.loss,
                bias_init=ADAM1_BIAS_INIT if r.loss == "sigmoid" else 0.0, fit_intercept=r.fit_intercept,
                optimizer=r.optimizer, momentum=r.momentum, secure_mode=r.secure,
                learning_rate_ceiling=float(ceiling), chain=chain, class_weight=s.class_weight, given=choice.given,
                average=0.0 if s.method == "adam1" or train.average_weights(s.steps, s.p["average"]) is None
                else s.p["average"])
    if plan.private:
        eps = accounting.event_epsilon(plan.dp_event(), plan.delta, accountant=r.accountant, neighbouring=s.relation)
        plan = dataclasses.replace(plan, epsilon=eps)
    return plan


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
