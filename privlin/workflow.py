"""What runs when one model is trained: public checks → plans → charge → run → a fitted record.

The one fit workflow of privlin.  ``DPLinearClassifier.fit``, ``privlin.fit`` and :func:`privlin.sweep` call
:func:`fit_plans`; the estimator and ``SweepResult.model`` unpack its :class:`Fitted` records
(:func:`unpack`).  Reading order for a new maintainer: :func:`plans_for` (the guarantee's order: every check
on public facts, then the ledger, then the charge, then the rows), :func:`privlin.plan.make_plan` (the chain of
releases and every σ), :func:`privlin.runner.run` (the rows), :func:`report_for` (what the user is told).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import numpy as np

from . import data, public_fallback, releases, runner, secure_noise
from .plan import Plan, make_plan
from .report import PrivacyReport, setting_leaks

__all__ = ["Fitted", "host_values", "views", "fit_plans", "plans_for", "public_plans", "run_plans", "class_names",
           "report_for", "unpack", "coef_of", "input_space_weights", "transformed_feature_names", "estimator_charge"]


@dataclasses.dataclass(frozen=True)
class Fitted:
    """One fitted model as privlin releases it (every field public).

    Attributes
    ----------
    plan : Plan
    classes : ndarray (k,) — the public class list the labels were matched against (a store's: indices 0..k-1)
    coef : ndarray (k, d') float64 — the weights as trained, on the *transformed* rows (the estimator's
        ``coef_transformed_``); d' = ``plan.model_dim``
    intercept : ndarray (k,) float64 — the estimator's ``intercept_transformed_``
    values : dict — every release's value by its name, on the host (:func:`host_values`), given ones included:
        the one record of what the releases released; ``mean``, ``scaling``, ``curvature``, ``radius`` and
        ``extra`` are views of it (:func:`views`)
    report : PrivacyReport
    ledger : the ledger charged (None: none)
    class_names : ndarray (k,) or None — the names the store publishes for ``classes`` (its labels index them),
        where the class list came from the store: the estimator's ``classes_`` (what ``predict`` returns)
    """

    plan: Plan
    classes: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    values: dict
    report: PrivacyReport
    ledger: Any = None
    class_names: Optional[np.ndarray] = None

    mean = property(lambda self: views(self.plan, self.values)["mean"])
    scaling = property(lambda self: views(self.plan, self.values)["scaling"])
    curvature = property(lambda self: views(self.plan, self.values)["curvature"])
    radius = property(lambda self: views(self.plan, self.values)["radius"])
    extra = property(lambda self: views(self.plan, self.values)["extra"])


def host_values(values) -> dict:
    """Released values on the host: a scalar as a Python float, an array as NumPy (the value the report, the
    records and the estimator's attributes read)."""
    return {name: jax.tree.map(lambda a: float(a) if np.ndim(a) == 0 else np.asarray(a), v)
            for name, v in values.items()}


def views(plan: Plan, values) -> dict:
    """The released values as the estimator's attributes show them, all derived here from ``values`` (by release
    name): ``mean`` (float64, the chain of means where re-centering rounds ran), ``scaling``
    (:class:`privlin.releases.scaling.Scaling`) and ``radius`` (log₂ R) — the row map the chain's releases define — the
    ``curvature`` bound, and ``extra``: the values of releases privlin does not ship."""
    rows = plan.row_map(values)
    curvature = values.get(releases.CURVATURE.name)
    return {"mean": None if rows.mean is None else np.asarray(rows.mean, dtype=np.float64), "scaling": rows.scaling,
            "radius": None if rows.log_scale is None else float(rows.log_scale),
            "curvature": None if curvature is None else float(curvature),
            "extra": {name: v for name, v in values.items() if name not in releases.BUILT_IN}}


def estimator_charge(seeded: bool) -> Callable:
    """The ledger charge of one estimator fit: its plan's event, ε, δ and ledger parameters."""
    def charge(led, plans):
        (plan,) = plans
        led.charge(plan.dp_event(), mechanism=f"DPLinearClassifier/{plan.method}", epsilon=plan.epsilon,
                   delta=plan.delta, params=plan.ledger_params(seeded), neighbouring=plan.neighbouring)
    return charge


def fit_plans(source: data.Source, params_list: Sequence[dict], keys: Sequence, *, seeded: bool, classes,
              budget, ledger, charge: Callable, block_rows: int, memory_limit: int, verbose: bool,
              stacklevel: int = 7, report_ledger: bool = True,
              given: Mapping[str, Any] | None = None, public=None) -> list[Fitted]:
    """Fit one model per parameter set on ``source``, each with its key: the whole private workflow
    (:func:`plans_for`, then :func:`run_plans`).

    ``charge(ledger, plans)`` records the fits on the data's ledger (one entry per fit, or one composed entry
    for a sweep); it runs after every public check and before any private row is read (:func:`plans_for`).
    ``report_ledger``: whether each report names the ledger and its total (a sweep's per-setting reports do not).
    ``given``: ``{release name: value}`` of public values the fit uses in those releases' place, exactly as if
    released (statistics computed elsewhere, on public data): they are not released here, take no share of the
    budget and are not charged (:func:`privlin.plan.make_plan`'s ``given``).  ``public``: a resolved public source
    (:class:`privlin.public.Public`) whose statistics are given so (:meth:`~privlin.public.Public.inputs`); the
    ledger entry and the reports name it.
    """
    names = class_names(source, classes)
    given = dict(given or {})
    if public is not None:
        params_list, charge, more = public.inputs(params_list, charge, n=source.n, dim=source.dim,
                                                  block_rows=block_rows, memory_limit=memory_limit, verbose=verbose)
        given = public_fallback.Given({**given, **more}, checks=getattr(more, "checks", ()))
    cls_, plans, leaks, led = plans_for(source, params_list, classes=classes, budget=budget, ledger=ledger,
                                        charge=charge, stacklevel=stacklevel, given=tuple(given))
    return run_plans(plans, source, keys, cls_, seeded=seeded, leaks=leaks, ledger=led, names=names,
                     block_rows=block_rows, memory_limit=memory_limit, verbose=verbose, report_ledger=report_ledger,
                     given=given, public=public)


def class_names(source: data.Source, classes) -> Optional[np.ndarray]:
    """The names a store publishes for its labels where the class list comes from it (``classes`` None): the
    fitted model's ``classes_`` (what ``predict`` returns); else None."""
    published = source.published_classes() if classes is None else None
    return None if published is None else np.asarray(list(published))


def run_plans(plans: Sequence[Plan], source: data.Source, keys: Sequence, classes, *, seeded: bool, leaks=(),
              ledger=None, names=None, block_rows: int, memory_limit: int, verbose: bool,
              report_ledger: bool = True, given: Mapping[str, Any] | None = None, public=None) -> list[Fitted]:
    """Run plans made for ``source`` (its N and d) and ``classes``, each with its key: one :class:`Fitted` each.

    The caller has charged them (:func:`plans_for`, or one entry of its own for several runs, as a search does)
    before calling this, which reads the rows.  ``leaks``: the settings' warned leaks, for the reports;
    ``ledger``: the ledger charged (None: none); ``names``: the store's names for ``classes``
    (:func:`class_names`); ``given``: the public values of the plans' given releases (:func:`fit_plans`), and
    ``public`` the source they come from, which each report names.
    """
    led = ledger
    plans, shown, outcomes = public_fallback.checked(plans, source, list(keys), classes, given, block_rows=int(block_rows),
                                             verbose=bool(verbose))
    released = runner.run(plans, source, list(keys), classes, block_rows=int(block_rows),
                          memory_limit=int(memory_limit), verbose=bool(verbose), given=dict(given) if given else None)
    out = []
    for i, (plan, r) in enumerate(zip(shown, released)):
        values = host_values(r.values)
        if i in outcomes:  # the public check, released before the plan ran (privlin.public_fallback.checked)
            values[public_fallback.public_check.NAME] = host_values({"v": outcomes[i]})["v"]
        failed = i in outcomes and not outcomes[i].passed
        out.append(Fitted(plan=plan, classes=classes, coef=coef_of(r.W),
                          intercept=np.asarray(r.b, dtype=np.float64).copy(), values=values,
                          report=_naming(public, given, failed, report_for(
                              plan, seeded=seeded, leaks=leaks, data=source.description,
                              ledger=led if report_ledger else None, values=values), plan.public_clip),
                          ledger=led, class_names=names))
    return out


def _naming(public, given, failed: bool, report: PrivacyReport, clip: bool = False) -> PrivacyReport:
    """The report, naming the public source of its given statistics where it has one (``failed``: the fit's
    public check failed and it was given none: the report says so; ``clip``: the plan's ``public_clip``)."""
    return report if public is None else public.annotate(report, dict(given or {}), failed, clip)


def unpack(fitted: Fitted, est, *, ledger=True):
    """Set a ``DPLinearClassifier``'s fitted attributes from a record (the one place they are assigned)."""
    est.classes_ = fitted.classes if fitted.class_names is None else fitted.class_names
    est.coef_transformed_ = fitted.coef
    est.intercept_transformed_ = fitted.intercept
    view = views(fitted.plan, fitted.values)
    est.released_ = dict(fitted.values)
    est.mean_, est.scaling_, est.radius_ = view["mean"], view["scaling"], view["radius"]
    est.curvature_, est.extra_ = view["curvature"], view["extra"]
    est.n_features_in_ = fitted.plan.dim
    est.plan_ = fitted.plan
    est.ledger_ = fitted.ledger if ledger else None
    est.privacy_ = fitted.report
    return est


def coef_of(W) -> np.ndarray:
    """The record's ``coef`` (k, d') float64 from weights W (d', k), transposed where W lives (on a GPU a
    cheap device copy; a transposing copy on the host is slow for large d·k: BENCHMARKS.md, "streamed fit")."""
    return np.array(W.T, dtype=np.float64, order="C")


def input_space_weights(plan: Plan, coef: np.ndarray, intercept: np.ndarray,
                        values=None) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``coef_`` and ``intercept_``: the decision function as an exact affine map of the input rows.

    ``decision_function(X) == X @ coef_.T + intercept_`` (raveled for two classes), up to float rounding: two
    classes give one row, the margin of ``classes_[1]`` (``W[:, 1] - W[:, 0]``, the same for softmax and for
    sigmoid loss, since the decision function is that difference), more give one row per class.  Such a map exists
    only where the preprocessing is affine, i.e. with ``normalize=False`` (then the rows are used as given); scaling
    each row to norm ``clip`` is not (and the centering, scaling and radial stages all follow it), so then no
    input-space weights reproduce the model and this raises AttributeError (``hasattr(est, "coef_")`` is False)
    rather than let a transformed weight be paired with an input feature's name.  Rows projected onto a given
    public subspace (``values``: the released values, by release name) are a linear map too: its basis is folded in.
    """
    if plan.normalize:
        raise AttributeError("coef_ is not defined for this model: with normalize=True each row is scaled to norm "
                             "`clip` (not an affine map of X), so no input-space weights reproduce it; its weights "
                             "on the transformed rows are coef_transformed_ (names: transformed_feature_names_)")
    coef, intercept = np.asarray(coef, np.float64), np.asarray(intercept, np.float64)
    if plan.projected:
        coef = coef @ np.asarray(plan.row_map(values or {}).project, np.float64).T
    if coef.shape[0] == 2:
        return coef[1:] - coef[:1], intercept[1:] - intercept[:1]
    return coef.copy(), intercept.copy()


def transformed_feature_names(plan: Plan, feature_names_in=None) -> np.ndarray:
    """Names of the coordinates ``coef_transformed_`` weighs (object array, ``plan.model_dim`` long).

    Without normalization they are the input features (``feature_names_in_``, else scikit-learn's ``x0, x1, ...``);
    otherwise ``transformed0, ...`` (a normalized, centered, whitened coordinate is no input feature), then the
    coordinates the releases add (the radial one: ``log_norm``, :mod:`privlin.releases.norms`).
    """
    if plan.projected:  # the coordinates of a public subspace (privlin.releases.project): no input feature either
        names = [f"public_direction{i}" for i in range(plan.model_dim)]
    elif not plan.normalize:
        names = feature_names_in if feature_names_in is not None else [f"x{i}" for i in range(plan.dim)]
    else:
        names = [f"transformed{i}" for i in range(plan.dim)]
        for release in plan.ran:  # coordinates a release adds, in the order they run (the radial one: log_norm)
            names += (["log_norm"] if release.name == "radius" else
                      [f"{release.name}{j}" for j in range(release.adds_dims)])[:release.adds_dims]
    assert len(names) == plan.model_dim, (len(names), plan.model_dim)
    return np.asarray(names, dtype=object)


# ----------------------------------------------------------------------------- the order of the guarantee

def _public_setting_leaks(plans, stacklevel: int) -> list[str]:
    """The plans' settings that void a guarantee (ε = ∞, δ ≥ 1/N), warned once each."""
    worst = min(plans, key=lambda p: (p.private, -p.delta))
    return setting_leaks(private=worst.private, delta=worst.delta, n=worst.n, stacklevel=stacklevel)


def _secure_checks(plans) -> None:
    """secure_mode's exact grid holds every released statistic (bounded by N·C, public) with room for its noise;
    its host-side noise is drawn on one process only."""
    import jax

    for p in plans:
        if p.secure_mode and jax.process_count() > 1:
            raise ValueError("secure_mode draws its noise on the host from os.urandom: run it in one process")
        if p.secure_mode and p.private:
            for std, _, bound in p.secure_table().values():
                secure_noise.check_plan(std, bound)


def public_plans(params_list, *, n: int, dim: int, classes, stacklevel: int = 6,
                 given: tuple = ()) -> tuple[list[Plan], list[str]]:
    """Plans from public facts alone (N, d, the public class list or None) and the settings' warned leaks, with
    secure mode's checks: what :func:`plans_for` makes before the ledger, and what a caller that charges several
    runs as one entry (a search's folds, each of a public size) makes for each run before any row is read;
    ``given``: names of releases whose values are given publicly (:func:`privlin.plan.make_plan`)."""
    plans = [make_plan(p, n=n, dim=dim, n_classes=None if classes is None else classes.size, classes=classes,
                       given=given) for p in params_list]
    leaks = _public_setting_leaks(plans, stacklevel)
    _secure_checks(plans)
    return plans, leaks


def plans_for(source: data.Source, params_list, *, classes, budget, ledger, charge, stacklevel: int = 6,
              given: tuple = ()):
    """Plans for ``source``, charged before any private row is read: ``(classes, plans, leaks, ledger)``.

    The order is the guarantee: public checks (parameters, N, d) and the plans first; then the ledger; then,
    if no class list is given or published, the private labels for one (PrivacyLeakWarning: that list is
    released unprotected) and its checks (at least 2 classes) — after the ledger's cap was checked, so a
    refused fit reads nothing, and before the charge, so no error that depends on a private row comes after
    it; then ``charge(ledger, plans)`` (which may refuse).  The class count never changes the noise, so the
    charged event is the one that runs.
    """
    known = classes is not None or source.published_classes() is not None
    cls_, leaks = data.public_classes(source, classes, stacklevel=stacklevel) if known else (None, [])
    plans, more = public_plans(params_list, n=source.n, dim=source.dim, classes=cls_, stacklevel=stacklevel + 1,
                               given=given)
    leaks += more
    led = source.ledger(cap=budget, ledger=ledger)
    if cls_ is None:  # the warned leak: read before the charge, so its errors ("1 class") come before it too
        if led is not None:
            _refuse_before_reading(led, plans, charge)
        cls_, more = data.public_classes(source, None, stacklevel=stacklevel)
        leaks += more
        planned = [p.dp_event() for p in plans]
        plans = [make_plan(p, n=source.n, dim=source.dim, n_classes=cls_.size, classes=cls_, given=given)
                 for p in params_list]
        assert [p.dp_event() for p in plans] == planned, "the class count changed the noise"
    if led is not None:
        charge(led, plans)
    return cls_, plans, leaks, led


def _refuse_before_reading(led, plans, charge) -> None:
    """Raise the ledger's PrivacyBudgetExceeded now, before the labels are read, if ``charge`` would be refused.

    A refusal is left to ``charge`` itself (so it records a budget asked for, as a refused charge does); should
    the charge pass after all (another writer changed the ledger in between) the fit stops anyway, charged and
    with nothing read: conservative.
    """
    from dp_accounting import dp_event as _ev

    from .ledger import PrivacyBudgetExceeded

    try:
        led.check(_ev.ComposedDpEvent([p.dp_event() for p in plans]), mechanism="this fit")
    except PrivacyBudgetExceeded:
        charge(led, plans)
        raise


# ----------------------------------------------------------------------------- what the user is told

def report_for(plan: Plan, *, seeded: bool, leaks=(), data: str = "", ledger=None, curvature=None, radius=None,
               values=None) -> PrivacyReport:
    """The privacy report of a plan that ran: its guarantee, σ's, and the notes its chain derives from the
    released ``values`` (by release name; ``curvature`` and ``radius`` may be given as keywords)."""
    values = {"curvature": curvature, "radius": radius, **(values or {})}
    lr_w, _ = plan.learning_rates_after(values.get("curvature"))
    weights = plan.class_weight and ("class weights (public, each row's contribution scaled before the clip bound): "
                                     + ", ".join(f"{w:.3g}" for w in plan.class_weight))
    notes = "; ".join(p for p in [_budget_note(plan), *plan.notes(values), weights] if p) or None
    return PrivacyReport(
        epsilon=plan.epsilon, delta=plan.delta, noise_multipliers=plan.noise_multipliers(), steps=plan.steps,
        sample_rate=plan.sample_rate, accountant=plan.accountant, neighbouring=plan.neighbouring, seeded=seeded,
        dp_event=plan.dp_event(), clip=plan.clip, method=plan.method, n_rows=plan.n, leaks=tuple(leaks),
        learning_rate=lr_w, secure_mode=plan.secure_mode, data=data, notes=notes,
        ledger=None if ledger is None else ledger.where, ledger_spent=None if ledger is None else ledger.spent())


def _budget_note(plan: Plan) -> str | None:
    """Where the budget went: each mechanism's share of the GDP budget μ² (the report's ``notes``)."""
    shares = plan.budget_shares()
    if not shares:
        return None
    return "budget (share of μ²): " + ", ".join(f"{name} {100 * v:.3g}%" for name, v in shares.items())
