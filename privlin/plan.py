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
from types import SimpleNamespace
from typing import Any, Mapping

import jax.numpy as jnp
import numpy as np
from dp_accounting import dp_event as _ev

from . import accounting, noise, preprocess, releases, scaling, sensitivity
from .defaults import (ADAM1_BIAS_INIT, ADAM_LR, CURVATURE_FLATNESS, CURVATURE_GAIN, CURVATURE_SHARE,
                       DEFAULT_CENTER_SHARE, DEFAULT_EPSILON, DEFAULT_SCALE_SHARE, DEFAULT_STEPS, LOGIT_NOISE,
                       MAX_STEPS, METHODS, PARAMS, RADIUS_SHARE, RECENTER_SHARE)
from .releases import Release
from .releases.base import planned_sigma, row_map

__all__ = ["Plan", "Static", "make_plan", "class_weights", "default_learning_rate", "METHODS", "DEFAULT_EPSILON", "DEFAULT_STEPS",
           "LOGIT_NOISE", "DEFAULT_CENTER_SHARE", "DEFAULT_SCALE_SHARE", "CURVATURE_SHARE", "RADIUS_SHARE",
           "RECENTER_SHARE", "ADAM_LR", "stability_caps", "learning_rates"]


#: The training settings a compiled fit specializes on (with the chain's σ ratios: :class:`Static`).
STATIC_SETTINGS = ("method", "steps", "sample_rate", "clip", "normalize", "loss", "bias_init", "fit_intercept",
                   "optimizer", "momentum", "class_weight")


class Static(collections.namedtuple("Static", (*STATIC_SETTINGS, "chain"))):
    """What a compiled fit specializes on (hashable): the plan's :data:`STATIC_SETTINGS`, and ``chain``: each
    release's ``(release, σ/σ_ref)``, a fixed ratio to the plan's reference σ (:attr:`Plan.reference_sigma`), the
    same at every ε.  Shapes come from the arrays, and ε, σ, the learning rate and the key are arguments, so one
    program serves an ε grid or CV folds."""

    __slots__ = ()

    def release(self, name: str):
        """``(release, ratio)`` of the chain's release ``name``, or None where it is not made."""
        return next(((r, x) for r, x in self.chain if r.name == name), None)

    @property
    def centered(self) -> bool:
        return self.release("center") is not None


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
        """1, or 2 where a refining pass pays (:func:`privlin.preprocess.center_stages`, from public facts)."""
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
    radial = property(lambda self: self.release("radius") is not None)
    curved = property(lambda self: self.release("curvature") is not None)

    def row_map(self, values: Mapping[str, Any]):
        """The row map that the released ``values`` (by release name) define: how the fitted model maps rows
        (:func:`privlin.releases.base.row_map`, in the order the releases ran)."""
        return row_map([r for r, _ in self.chain], values)

    @property
    def model_dim(self) -> int:
        """Inputs of the model: the rows' dimension, plus what the releases add (the radial coordinate)."""
        return self.dim + sum(r.adds_dims for r, _ in self.chain)

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
        return {"steps": self.steps, "sample_rate": self.sample_rate, "sigma": self.sigma, **sig,
                "accountant": self.accountant, "n": self.n, "seeded": bool(seeded)}

    def notes(self, values: Mapping[str, Any]) -> list[str]:
        """The releases' report notes, in chain order, given their released ``values`` by name."""
        return [note for r, s in self.chain if (note := r.note(self, s, values.get(r.name)))]

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
                      chain=tuple((r, float(noise.sigma_float32(s / ref))) for r, s in self.chain))

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

def make_plan(params: Mapping[str, Any], *, n: int, dim: int, n_classes: int | None, classes=None) -> Plan:
    """The plan of ``DPLinearClassifier(**params)`` on N = ``n`` rows of dimension ``dim`` with ``n_classes``.

    ``params`` are the estimator's parameters (missing keys take :data:`privlin.defaults.PARAMS`).  Only public
    facts enter.  ``n_classes=None``: not known yet (the class list will be read from the labels after the
    charge); the noise, and so the event charged, never depend on it.

    The defaults (every ``None`` parameter), all from public facts:

    * preprocessing: normalize, privately center (``center_share`` = 5% of μ²; in two stages where the first's
      expected error is between 1% and a third of the row norm, :func:`privlin.preprocess.center_stages`), then
      the scaling stage of :mod:`privlin.scaling` (``scale_share`` = 15% of μ², for ``sgd``/``minibatch``;
      ``adam1`` stays the one-pass method of Mehta et al.): per-dimension moments, and whitening where it can
      resolve two or more directions; a release that cannot be told from its own noise is not made and its
      share goes to training.  With the scaling stage, where the release can find it (:meth:`privlin.releases.Radius.pays`), a
      typical row norm (``radial``; :data:`RADIUS_SHARE`) and each row's log-norm as one more coordinate.
    * ``recenter``: with the scaling stage, where the centering's expected error is ≥ a tenth of the row norm
      (:func:`privlin.preprocess.recenter_rounds`), two re-centering rounds before it (:data:`RECENTER_SHARE`).
      Never in secure mode.
    * ``fit_intercept``: True for ``sgd``/``minibatch`` — centered rows carry no constant direction, so without an
      intercept a model cannot express unequal class frequencies; ``adam1`` keeps Mehta et al.'s frozen bias −10.
    * ``steps``, ``learning_rate``: :data:`DEFAULT_STEPS`, :func:`default_learning_rate`.
    * the curvature release (:data:`CURVATURE_SHARE`, :func:`_curvature_pays`): with the sgd optimizer, centered
      rows and no rate given, where the noise term is well above the stability cap; W's rate is then lifted at
      run time from the released bound (:func:`learning_rates`), up to ``learning_rate_ceiling``.
    * added releases (:data:`privlin.releases.ADDED`): each asks for its own share from public facts.

    Raises
    ------
    ValueError
        A combination no plan can run (adam1 with several steps, GDP for a subsampled plan, ...).
    """
    s = _validate(params, n, dim, n_classes)
    s.class_weight = class_weights(s.p["class_weight"], classes, s.k)
    _resolve_defaults(s)
    shares = _choose_releases(s)
    sigma, sig = _calibrate_plan(s, shares)
    return _build(s, shares, sigma, sig)


def _validate(params, n, dim, n_classes) -> SimpleNamespace:
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
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
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
    sigma_given, epsilon = p["noise_multiplier"], p["epsilon"]
    if (epsilon is None) == (sigma_given is None):
        raise ValueError("give epsilon (the noise is calibrated to it) or noise_multiplier (the ε it achieves is "
                         "reported), not both" if epsilon is not None else "give epsilon or noise_multiplier")
    return SimpleNamespace(p=p, n=n, dim=dim, k=k, method=method, steps=steps, relation=relation, center=center,
                           sigma_given=sigma_given, epsilon=epsilon, delta=float(p["delta"]))


def _resolve_defaults(s) -> None:
    """Step 2: every ``None`` parameter that does not depend on which releases are bought."""
    p, method = s.p, s.method
    s.q = 1.0 if method != "minibatch" else min(1.0, p["batch_size"] / s.n)
    scale = p["scale"]
    if scale is None:
        scale = s.center and method != "adam1" and s.sigma_given is None
    if scale and not s.center:
        raise ValueError("the scaling stage works on privately centered rows: it needs center=True")
    if scale and s.sigma_given is not None:
        raise ValueError("scale=True calibrates its noise from epsilon; with noise_multiplier given use scale=False")
    s.scale = scale
    s.acct = p["accountant"] or ("gdp" if s.q >= 1.0 else "pld")
    if s.acct == "gdp" and s.q < 1.0:
        raise ValueError("accountant='gdp' is exact only for full-batch methods; use 'pld' or 'rdp' for minibatch")
    s.center_share = DEFAULT_CENTER_SHARE if p["center_share"] is None else float(p["center_share"])
    s.scale_share = DEFAULT_SCALE_SHARE if p["scale_share"] is None else float(p["scale_share"])
    s.loss = p["loss"] or ("sigmoid" if method == "adam1" else "softmax")
    s.optimizer = "sgd" if method == "sgd" else ("adam" if method == "adam1" else p["optimizer"])
    s.fit_intercept = (method != "adam1") if p["fit_intercept"] is None else bool(p["fit_intercept"])
    s.clip, s.momentum = float(p["clip"]), float(p["momentum"])
    s.secure = bool(p["secure_mode"])


def _choose_releases(s) -> dict:
    """Step 3: ``{release name: share of μ²}`` of every release the plan buys, decided in GDP terms from
    (ε, δ, N, d) before calibration; sets ``s.mdim`` (the model's inputs) and ``s.added`` (added releases)."""
    p, n, epsilon = s.p, s.n, s.epsilon
    shares = {"center": s.center_share} if s.center else {}
    s.mdim = s.dim
    if s.scale and epsilon is not None:
        radial = p["radial"]
        if radial is None:
            radial = releases.RADIUS.pays(float(epsilon), s.delta, n, s.relation)
        stage = releases.scaling_stage(float(epsilon), s.delta, s.scale_share, n, s.dim + int(radial),
                                       s.relation)
        if radial and "scale" in stage:
            shares["radius"], s.mdim = RADIUS_SHARE, s.dim + 1
        elif p["radial"]:
            raise ValueError("radial=True needs the scaling stage, which this budget cannot resolve at this N")
        shares.update(stage)
    elif p["radial"]:
        raise ValueError("radial=True needs the scaling stage (it weighs the radial coordinate): scale=True "
                         "(or None) and epsilon given")
    recenter = p["recenter"]
    if recenter and (not s.center or s.sigma_given is not None or s.secure):
        raise ValueError("recenter=True needs center=True and epsilon (its noise is calibrated from it), and is not "
                         "made in secure_mode")
    if recenter is None:
        recenter = ("scale" in shares and not s.secure and not math.isinf(epsilon)
                    and preprocess.recenter_rounds(planned_sigma(s.center_share, accounting.gdp_mu_for(
                        float(epsilon), s.delta), s.relation), n, s.mdim, s.clip) > 0)
    if recenter:
        shares["recenter"] = RECENTER_SHARE
    if (s.center and epsilon is not None and p["learning_rate"] is None and s.optimizer == "sgd"
            and _curvature_pays(float(epsilon), s.delta, shares, n, s.mdim, steps=s.steps, q=s.q,
                                momentum=s.momentum, clip=s.clip, fit_intercept=s.fit_intercept,
                                relation=s.relation)):
        shares["curvature"] = CURVATURE_SHARE
    s.added = []
    if epsilon is not None:
        mu = math.inf if math.isinf(epsilon) else accounting.gdp_mu_for(float(epsilon), s.delta)
        facts = releases.Facts(n, s.dim, s.clip, mu, accounting.sensitivity_factor(s.relation), s.secure)
        for r in releases.ADDED:
            if (share := float(r.share(facts))) > 0:
                shares[r.name] = share
                s.added.append(r)
    if sum(shares.values()) >= 1.0:
        raise ValueError(f"center_share + scale_share must leave the training steps a share of the budget; "
                         f"got {shares}")
    return shares


def _calibrate_plan(s, shares) -> tuple[float, dict]:
    """Step 4: σ of the training steps and ``{name: σ}`` of every release bought."""
    sig = {}
    if s.sigma_given is not None:
        sigma = float(s.sigma_given)
        if s.center:
            if s.p["center_noise_multiplier"] is None:
                raise ValueError("with noise_multiplier given, give center_noise_multiplier too (or center=False)")
            sig["center"] = float(s.p["center_noise_multiplier"])
    elif math.isinf(s.epsilon):
        sigma = 0.0
        sig.update(dict.fromkeys(shares, 0.0))  # the non-private baseline: exact statistics
    else:
        sigma, sig = _calibrate(float(s.epsilon), s.delta, steps=s.steps, q=s.q, shares=shares,
                                accountant=s.acct, relation=s.relation)
    return sigma, sig


def _build(s, shares, sigma, sig) -> Plan:
    """Step 5: the plan, its chain in run order, its learning rate and the ε it achieves."""
    lr, ceiling = s.p["learning_rate"], math.nan
    if lr is None:
        lr = default_learning_rate(s.method, s.optimizer, sigma, s.q * s.n, steps=s.steps, momentum=s.momentum,
                                   clip=s.clip, fit_intercept=s.fit_intercept)
        if "curvature" in shares:
            ceiling = _noise_rate(sigma, s.q * s.n, steps=s.steps, momentum=s.momentum, clip=s.clip)
    made = {"radius": releases.RADIUS, "scale": releases.MOMENTS, "whiten": releases.WHITEN,
            "curvature": releases.CURVATURE, "recenter": releases.Recentering(preprocess.RECENTER_ROUNDS)}
    if "center" in sig:
        made["center"] = releases.Centering(1 if s.secure else preprocess.center_stages(sig["center"], s.n, s.mdim,
                                                                                          s.clip))
    made.update({r.name: r for r in s.added})
    if bad := [r.name for r in s.added if r.after not in releases.ORDER]:
        raise ValueError(f"added releases {bad} must run after a built-in release {releases.ORDER}")
    order = [x for name in releases.ORDER for x in (name, *(r.name for r in s.added if r.after == name))]
    chain = tuple((made[name], float(sig[name])) for name in order if name in sig)
    plan = Plan(method=s.method, epsilon=math.inf, delta=s.delta, neighbouring=s.relation,
                accountant="none" if sigma == 0 else s.acct, n=s.n, dim=s.dim, n_classes=s.k, steps=s.steps,
                sample_rate=s.q, sigma=sigma, learning_rate=float(lr), clip=s.clip,
                normalize=bool(s.p["normalize"]), loss=s.loss,
                bias_init=ADAM1_BIAS_INIT if s.loss == "sigmoid" else 0.0, fit_intercept=s.fit_intercept,
                optimizer=s.optimizer, momentum=s.momentum, secure_mode=s.secure,
                learning_rate_ceiling=float(ceiling), chain=chain,
                class_weight=s.class_weight)
    if plan.private:
        eps = accounting.event_epsilon(plan.dp_event(), plan.delta, accountant=s.acct, neighbouring=s.relation)
        plan = dataclasses.replace(plan, epsilon=eps)
    return plan


def _curvature_pays(epsilon, delta, shares, n, dim, *, steps, q, momentum, clip, fit_intercept, relation) -> bool:
    """Whether to buy the curvature release (:data:`CURVATURE_SHARE` of μ²): its pass is affordable (the bounds of
    whitening), the noise term is at least :data:`~privlin.defaults.CURVATURE_GAIN` × the stability cap (so a
    flatter curvature could lift the rate by that much), and the release can show a curvature at least
    :data:`~privlin.defaults.CURVATURE_FLATNESS` × below the worst case.  Decided, like :func:`privlin.releases.scaling_stage`,
    from the GDP view of the budget before calibration: public facts only (BENCHMARKS.md, "curvature")."""
    if not scaling.second_moment_affordable(n, dim):
        return False
    if math.isinf(epsilon):
        return True
    mu = accounting.gdp_mu_for(epsilon, delta)
    rest = 1.0 - sum(shares.values()) - CURVATURE_SHARE
    if rest <= 0:
        return False
    sigma = planned_sigma(rest, mu, relation) * q * math.sqrt(steps)  # T steps sharing the rest of μ²
    noise_rate = _noise_rate(sigma, q * n, steps=steps, momentum=momentum, clip=clip)
    if noise_rate < CURVATURE_GAIN * _joint_cap(momentum, clip, fit_intercept):
        return False
    std = planned_sigma(CURVATURE_SHARE, mu, relation) * scaling.curvature_sensitivity(n, dim)
    flattest = float(scaling.curvature_bound(n / dim, n, dim, std))  # the bound if the rows were isotropic
    return CURVATURE_FLATNESS * flattest < 1.0


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
      smaller rate should give about the same model: T stays DP-RandP's 100, ten momentum time constants.  No
      rule for T from (N, d, σ) has been found that wins everywhere, so T is not derived (BENCHMARKS.md, "privlin
      defaults on unseen data").
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
    return 2.0 * _heavy_ball_gain(momentum) / (clip**2 + (1.0 if fit_intercept else 0.0))


def _heavy_ball_gain(momentum) -> float:
    """2(1+β): heavy ball with momentum β is stable for lr·L below it (Polyak 1964)."""
    return 2.0 * (1.0 + momentum)


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
    gain = _heavy_ball_gain(momentum)  # lr·L below this is stable
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
