"""Private model selection in scikit-learn's shape: :class:`PrivateGridSearchCV`.

Why: ``GridSearchCV(DPLinearClassifier(...))`` charges its fits but scores every candidate with *exact* accuracy
on held-out private rows, publishes the scores and picks the best by a plain argmax: one validation row's label
can be read off ``cv_results_`` (PRIVACY.md).  Here every step that touches a row is a mechanism on the ledger,
charged as one entry before any row is read:

* **the fold fits**: K folds × M candidates, each a :class:`privlin.DPLinearClassifier` fit (planned once, from
  the public N − |fold|, by :func:`privlin.workflow.public_plans`; those plans run by
  :func:`privlin.workflow.run_plans`), charged with its own event — every row is in K − 1 of them; charging K is
  the safe side;
* **the scores**: each candidate's correct predictions summed over the K folds
  (:func:`privlin.prediction.correct_counts`, the estimator's and the sweep's scoring rule).  Each row validates in
  exactly one fold, so replacing it (by a null row, or by another row) moves each of the M sums by at most 1: the count
  vector has L2 sensitivity √M.  It is released with Gaussian noise of std σ·√M, one ``GaussianDpEvent(σ)``,
  σ calibrated in :mod:`privlin.accounting` to ``score_epsilon`` (GDP, exact).  Under ``replace_one`` the ledger
  accounts that event as sensitivity 2 (every privlin Gaussian is): conservative by 2× for the scores.  Where any
  candidate runs ``secure_mode`` the counts are released as every secure release is (the discrete Gaussian from
  ``os.urandom``, :func:`privlin.secure_noise.secure_gaussian_release`); otherwise the noise is a float64 normal,
  whose floating-point output can betray a count (Mironov 2012): ``privacy_`` and PRIVACY.md say which;
* **the selection**: ``best_params_`` is the argmax of the published noisy scores — post-processing, free;
* **the refit** on all N rows with the chosen candidate.  Its event depends on the choice, and the charge comes
  first, so the one charged dominates every candidate's: the candidates' common event where they share one;
  among full-batch Gaussian plans the one with the largest μ (Gaussian DP is ordered by μ); otherwise all of
  them composed (the safe side; stated in ``privacy_``).

The folds are a random partition of the N rows into K parts of public sizes (``np.array_split``: a function of N)
drawn from ``random_state`` (128 bits of OS entropy unless seeded); the guarantee holds for any partition made
without looking at the rows, and the partition is never stored.  Labels and rows are read only after the charge,
and no error after it depends on a row: a label outside the public class list is a null row (never correct).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from numbers import Integral, Real

import jax
import numpy as np
from dp_accounting import dp_event as _ev
from sklearn.base import BaseEstimator, MetaEstimatorMixin
from sklearn.model_selection import ParameterGrid
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_array, check_consistent_length, check_is_fitted

from . import accounting, data, noise, prediction, public, secure_noise, workflow
from .estimator import DPLinearClassifier
from .events import describe
from .report import PrivacyReport, relation_label, setting_leaks
from .selection import noisy_counts

__all__ = ["PrivateGridSearchCV", "SearchPrivacy"]

#: Estimator parameters a grid may not vary: where the charge goes, the noise seed, the public class list and
#: the relation are one per search.
_FIXED = ("ledger", "budget", "random_state", "classes", "neighbouring")


@dataclasses.dataclass(frozen=True)
class SearchPrivacy:
    """What a :class:`PrivateGridSearchCV` fit cost, as charged (one ledger entry, before any row was read).

    Attributes
    ----------
    epsilon, delta : float
        The whole search (fold fits, scores, refit) composed by :func:`privlin.accounting.compose_epsilon`.
    dp_event : dp_accounting.DpEvent
        ``ComposedDpEvent([fold fits..., scores, refit])``: the event on the ledger.
    neighbouring : str
    n_rows, folds, candidates : int
        N, K and M.
    fold_events : list of DpEvent
        The K·M fold fits' events (fold-major).
    score_noise_multiplier : float
        σ of the scores' Gaussian (0 with ``score_epsilon=inf``: exact scores, non-private).
    score_noise_std : float
        Std of the noise on each candidate's summed correct count (σ·√M), in rows; on ``mean_test_score``
        it is ``score_noise_std / n_rows``.
    score_epsilon, score_delta : float
        The scores' own guarantee.
    score_noise : str
        How the scores' noise was drawn: secure mode's discrete Gaussian, or a float64 normal (not covered against
        floating-point attacks; PRIVACY.md).
    refit_event : DpEvent or None
        The refit as charged; ``refit_rule`` says how it was chosen.
    seeded : bool
    ledger : str or None
    ledger_spent : (float, float) or None
    """

    epsilon: float
    delta: float
    dp_event: _ev.DpEvent
    neighbouring: str
    n_rows: int
    folds: int
    candidates: int
    fold_events: list = dataclasses.field(repr=False)
    score_noise_multiplier: float
    score_noise_std: float
    score_epsilon: float
    score_delta: float
    score_noise: str
    refit_event: _ev.DpEvent | None
    refit_rule: str
    seeded: bool
    ledger: str | None = None
    ledger_spent: tuple | None = None

    def __str__(self) -> str:
        head = ("NON-PRIVATE search (a candidate or the scores at epsilon=inf)" if math.isinf(self.epsilon) else
                f"({self.epsilon:.4g}, {self.delta:.3g})-DP search, {relation_label(self.neighbouring)} neighbours")
        lines = [f"{head} (N={self.n_rows}): {self.folds} folds x {self.candidates} candidates = "
                 f"{self.folds * self.candidates} fits, the noisy scores (σ={self.score_noise_multiplier:.4g}, "
                 f"std {self.score_noise_std:.3g} correct rows per candidate, ε={self.score_epsilon:.4g} at "
                 f"δ={self.score_delta:g}), the argmax (free)"
                 + (f", the refit as {describe(self.refit_event)} ({self.refit_rule})" if self.refit_event else ""),
                 f"score noise: {self.score_noise}",
                 "noise: seeded (reproducible, not secret)" if self.seeded else "noise: OS-entropy seeded"]
        if self.ledger_spent is not None:
            lines.append(f"ledger {self.ledger}: total spent on these rows ε={self.ledger_spent[0]:.4g} at "
                         f"δ={self.ledger_spent[1]:.3g}")
        return "\n".join(lines)


class PrivateGridSearchCV(MetaEstimatorMixin, BaseEstimator):
    """Exhaustive search over a grid of :class:`privlin.DPLinearClassifier` parameters, every step charged.

    Cost (one ledger entry, charged before any row is read): the K·M fold fits, the M noisy scores (one Gaussian
    of ``score_epsilon``), the selection (free: argmax of the published noisy scores), the refit (the dominating
    candidate's event; see the module docstring).  ``privacy_`` holds each part and the total.

    Parameters
    ----------
    estimator : DPLinearClassifier
        Its parameters are every candidate's defaults; its ``classes`` (required: the public class list),
        ``ledger`` and ``budget`` are the search's, as for one fit (a store split charges its own ledger).
    param_grid : dict or list of dicts
        As scikit-learn's ``GridSearchCV``; it may not vary ``ledger``, ``budget``, ``random_state``, ``classes``
        or ``neighbouring``.
    cv : int, default=3
        Number of folds K ≥ 2: a random partition of the rows into parts of public sizes.  Splitter objects are
        refused (stratified or grouped splits look at the labels).
    score_epsilon : float or None, default=None
        ε of the scores' release at ``score_delta``; ``inf`` publishes exact scores (non-private, warned).  None:
        the smallest ε among the candidates (the scores cost about one more fit).
    score_delta : float or None, default=None
        None: the smallest δ among the candidates.
    refit : bool, default=True
        Refit the chosen candidate on all rows (``best_estimator_``, ``predict``, ``score``).
    random_state : None, int or numpy Generator, default=None
        Folds, fit noise and score noise; None: 128 bits of OS entropy (every record then says unseeded).  The
        scores' noise is secure mode's discrete Gaussian from ``os.urandom`` where any candidate runs ``secure_mode``
        (then ``random_state`` must be None), else privlin's float64 normal (:func:`privlin.noise.gaussian`).

    Attributes
    ----------
    cv_results_ : dict
        ``params``, ``param_<name>``, ``mean_test_score`` (the noisy summed correct count / N: noisy
        cross-validated accuracy), ``noisy_correct``, ``rank_test_score``.  Only noisy numbers.
    best_index_, best_params_, best_score_ :
        The argmax of the noisy scores.
    best_estimator_ : DPLinearClassifier
        Refit on all rows (``refit=True``); its ``ledger_`` is the search's.
    classes_ : ndarray
    n_splits_ : int
    privacy_ : SearchPrivacy
    ledger_ : privlin.ledger.PrivacyLedger or None
    """

    _parameter_constraints = {
        "estimator": [DPLinearClassifier],
        "param_grid": [dict, list],
        "cv": [Interval(Integral, 2, None, closed="left")],
        "score_epsilon": [Interval(Real, 0, float("inf"), closed="right"), None],
        "score_delta": [Interval(Real, 0, 1, closed="neither"), None],
        "refit": ["boolean"],
        "random_state": ["random_state", np.random.Generator],
    }

    def __init__(self, estimator, param_grid, *, cv=3, score_epsilon=None, score_delta=None, refit=True,
                 random_state=None):
        self.estimator = estimator
        self.param_grid = param_grid
        self.cv = cv
        self.score_epsilon = score_epsilon
        self.score_delta = score_delta
        self.refit = refit
        self.random_state = random_state

    # ------------------------------------------------------------------ public checks and the plan of the search

    def _candidates(self) -> list[dict]:
        grid = list(ParameterGrid(self.param_grid))
        for cand in grid:
            fixed = sorted(set(cand) & set(_FIXED))
            if fixed:
                raise ValueError(f"param_grid may not vary {fixed}: one ledger, budget, seed, class list and "
                                 "relation per search (set them on the estimator)")
        base = {k: v for k, v in self.estimator.get_params().items() if k not in ("ledger", "budget", "random_state")}
        out = []
        for cand in grid:
            params = {**base, **cand, "random_state": None}
            DPLinearClassifier(**params)._validate_params()
            out.append(params)
        return out

    def _score_budget(self, candidates) -> tuple[float, float]:
        deltas = [float(c["delta"]) for c in candidates]
        delta = min(deltas) if self.score_delta is None else float(self.score_delta)
        if self.score_epsilon is not None:
            return float(self.score_epsilon), delta
        eps = [c["epsilon"] for c in candidates]
        finite = [float(e) for e in eps if e is not None and math.isfinite(e)]
        if finite:
            return min(finite), delta
        if all(e is not None for e in eps):  # every candidate is the non-private baseline
            return math.inf, delta
        raise ValueError("the candidates give noise multipliers, not ε: pass score_epsilon")

    @staticmethod
    def _dominating_refit(events, delta: float, relation: str) -> tuple[_ev.DpEvent, str]:
        distinct = []
        for e in events:
            if e not in distinct:
                distinct.append(e)
        if len(distinct) == 1:
            return distinct[0], "every candidate's refit has this event"
        if all(accounting.composition_name([e]) == "exact GDP" for e in distinct):
            top = max(distinct, key=lambda e: accounting.event_epsilon(e, delta, accountant="gdp",
                                                                       neighbouring=relation))
            return top, "the candidate with the largest GDP μ, which dominates every other's refit"
        return _ev.ComposedDpEvent(distinct), "every distinct candidate's refit composed (no single one dominates)"

    # ------------------------------------------------------------------ fit

    def fit(self, X, y=None):
        """Search privately on ``X`` (n, d) and labels ``y`` (n,), or on a store split / source passed as ``X``.

        The steps: public checks; every plan, once, from public facts (:func:`privlin.workflow.public_plans`:
        each fold's N − |fold|, then N); the charge of the whole search; the rows; the fold fits
        (:func:`privlin.workflow.run_plans`, the plans as charged) and their counts
        (:func:`privlin.prediction.correct_counts`); the noisy scores; the refit.

        Raises
        ------
        ValueError
            Public facts only: the settings, the grid, shapes, the class list, fewer rows than folds.
        privlin.ledger.PrivacyBudgetExceeded
            The whole search would pass the ledger's cap: nothing was read, nothing recorded.
        """
        source, candidates = self._checked(X, y)
        est, n, k = self.estimator, source.n, int(self.cv)
        sizes = [len(part) for part in np.array_split(np.arange(n), k)]  # public: a function of N
        classes, _ = data.public_classes(source, est.classes, stacklevel=2)
        pub = public.resolve(est.public, source, audit=est.public_audit, budget=est.budget, ledger=est.ledger)
        candidates, _, given = public.inputs(pub, candidates, None, source, block_rows=est.block_rows,
                                             memory_limit=est.memory_limit, verbose=bool(est.verbose))
        fold_plans = [workflow.public_plans(candidates, n=n - size, dim=source.dim, classes=classes,
                                            stacklevel=3, given=tuple(given))[0] for size in sizes]
        refits, leaks = workflow.public_plans(candidates, n=n, dim=source.dim, classes=classes, stacklevel=3,
                                              given=tuple(given))
        info, secure = noise.make_key(self.random_state), any(c["secure_mode"] for c in candidates)
        privacy = self._privacy(candidates, fold_plans, refits, seeded=info.seeded, secure=secure)

        # the charge: the whole search, before any row is read
        led = source.ledger(cap=est.budget, ledger=est.ledger)
        if led is not None:
            score_eps = privacy.score_epsilon if math.isfinite(privacy.score_epsilon) else "inf"  # JSON has no inf
            led.charge(privacy.dp_event, mechanism="privlin.model_selection/PrivateGridSearchCV",
                       epsilon=privacy.epsilon, delta=privacy.delta, neighbouring=privacy.neighbouring,
                       params={"folds": k, "candidates": len(candidates), "fits": k * len(candidates), "n": n,
                               "fold_sizes": sizes, "score_sigma": privacy.score_noise_multiplier,
                               "score_epsilon": score_eps, "score_delta": privacy.score_delta,
                               "refit": privacy.refit_rule, "seeded": info.seeded, "secure_scores": secure,
                               **({} if pub is None else pub.ledger_params(tuple(given)))})
            privacy = dataclasses.replace(privacy, ledger=led.where, ledger_spent=led.spent())

        # the rows, after the charge: the fold fits as planned and their counts, then the noisy scores
        Xa, ya = _read(source, int(est.block_rows))
        keys = noise.split(info.key, k + 3)
        run = dict(seeded=info.seeded, block_rows=candidates[0]["block_rows"],
                   memory_limit=candidates[0]["memory_limit"], verbose=bool(est.verbose), report_ledger=False,
                   given=given, public=pub)
        correct = _fold_counts(fold_plans, sizes, Xa, ya, classes, keys, run)
        std = privacy.score_noise_std
        noisy = (correct.astype(np.float64) if std == 0 else
                 noisy_counts(correct, std, keys[1], secure=secure, l2_sensitivity=math.sqrt(len(candidates)), bound=n))
        del correct  # exact counts never leave this method

        self.classes_ = classes
        self.n_splits_ = k
        self.best_index_ = int(np.argmax(noisy))
        self.best_params_ = dict(ParameterGrid(self.param_grid)[self.best_index_])
        self.best_score_ = float(noisy[self.best_index_] / n)
        self.cv_results_ = _results(self.param_grid, noisy, n)
        self.ledger_ = led
        self.privacy_ = privacy
        if self.refit:
            (fit,) = workflow.run_plans([refits[self.best_index_]], data.ArraySource(Xa, ya), list(noise.split(
                keys[2], 1)), classes, leaks=leaks, **run)
            model = workflow.unpack(fit, DPLinearClassifier(**{**candidates[self.best_index_], "classes": classes}),
                                    ledger=False)
            model.set_params(ledger=est.ledger, budget=est.budget)
            model.ledger_ = led
            model.privacy_ = _chosen_report(model.privacy_, privacy)
            self.best_estimator_ = model
        return self

    def _checked(self, X, y) -> tuple[data.Source, list[dict]]:
        """The public checks of a search (settings, grid, shapes, the class list, N ≥ K): the source and the
        candidates (each a full set of estimator parameters)."""
        self._validate_params()
        if not isinstance(self.estimator, DPLinearClassifier):
            raise TypeError("PrivateGridSearchCV searches a privlin.DPLinearClassifier")
        if self.estimator.classes is None:
            raise ValueError("PrivateGridSearchCV needs the public class list: pass classes=... to the estimator "
                             "(a list read from the rows would be an unaccounted release)")
        if y is None and data.is_store_like(X):
            source = data.as_source(X, "train")
        else:
            X = check_array(X, dtype=[np.float32, np.float64], ensure_min_samples=1)
            y = data.row_labels(y)
            check_consistent_length(X, y)
            source = data.ArraySource(X, y)
        self.n_features_in_ = source.dim
        if source.n < int(self.cv):
            raise ValueError(f"cv={self.cv} folds need at least {self.cv} rows; the data has N={source.n}")
        if source.n_local != source.n:
            raise ValueError("PrivateGridSearchCV holds the rows in one process; run it without jax.distributed")
        candidates = self._candidates()
        if self.random_state is not None and any(c["secure_mode"] for c in candidates):
            raise ValueError("secure_mode candidates draw their noise from os.urandom: leave random_state=None")
        return source, candidates

    def _privacy(self, candidates, fold_plans, refits, *, seeded: bool, secure: bool) -> SearchPrivacy:
        """What the search costs, from its plans (public facts only): the scores' σ, the refit charged, the
        composition; the ledger fields are filled in once it is charged."""
        score_eps, score_delta = self._score_budget(candidates)
        n, relation = refits[0].n, refits[0].neighbouring
        if math.isinf(score_eps):
            setting_leaks(private=False, delta=score_delta, n=n, stacklevel=3)
            sigma, score_event = 0.0, _ev.NonPrivateDpEvent()
        else:
            sigma = accounting.calibrate_noise(score_eps, score_delta, accountant="gdp", neighbouring=relation)
            score_event = _ev.GaussianDpEvent(sigma)
        fold_events = [p.dp_event() for plans in fold_plans for p in plans]
        refit_event, refit_rule = (self._dominating_refit([p.dp_event() for p in refits], max(p.delta for p in refits),
                                                          relation) if self.refit else (None, "no refit"))
        events = [*fold_events, score_event] + ([refit_event] if refit_event is not None else [])
        delta = max([p.delta for plans in fold_plans for p in plans] + [score_delta])
        std = sigma * math.sqrt(len(candidates))
        if secure and std > 0:
            secure_noise.check_plan(std, n)  # the counts (each ≤ N) and their noise fit an exact grid: public facts
        return SearchPrivacy(
            epsilon=accounting.compose_epsilon(events, delta, neighbouring=relation), delta=delta,
            dp_event=_ev.ComposedDpEvent(events), neighbouring=relation, n_rows=n, folds=len(fold_plans),
            candidates=len(candidates), fold_events=fold_events, score_noise_multiplier=sigma, score_noise_std=std,
            score_epsilon=score_eps, score_delta=score_delta, score_noise=_score_noise(std, secure),
            refit_event=refit_event, refit_rule=refit_rule, seeded=seeded)

    # ------------------------------------------------------------------ the chosen model

    def _best(self) -> DPLinearClassifier:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_

    def predict(self, X):
        return self._best().predict(X)

    def predict_proba(self, X):
        return self._best().predict_proba(X)

    def decision_function(self, X):
        return self._best().decision_function(X)

    def score(self, X, y):
        """``best_estimator_.score``: exact accuracy on ``(X, y)``, a non-private release about those rows."""
        return self._best().score(X, y)


def _chosen_report(fit: PrivacyReport, search: SearchPrivacy) -> PrivacyReport:
    """The refit model's report: its choice used every row through the whole search, so its guarantee is the
    search's total (event, ε, δ, ledger); its own σ's stay, and ``chosen_by`` names the search and the refit
    alone."""
    return dataclasses.replace(
        fit, epsilon=search.epsilon, delta=search.delta, dp_event=search.dp_event, ledger=search.ledger,
        ledger_spent=search.ledger_spent,
        chosen_by=(f"PrivateGridSearchCV ({search.folds} folds x {search.candidates} candidates, noisy scores, "
                   f"refit): the (ε, δ) is the whole search's; this refit alone is ({fit.epsilon:.4g}, "
                   f"{fit.delta:.3g})-DP"))


def _score_noise(std: float, secure: bool) -> str:
    """What ``SearchPrivacy.score_noise`` says of the scores' noise."""
    if std == 0:
        return "none (exact scores, non-private)"
    if secure:
        return "discrete Gaussian from os.urandom on an exact grid (secure_mode)"
    return ("float64 Gaussian (not secure_mode: floating-point noise, not covered against floating-point attacks; "
            "PRIVACY.md)")


def _read(source: data.Source, block_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Every row N of ``source`` in memory (float32 X, labels as stored); a row without features (a store's
    skipped row) gets NaN features: a null row of every fit, never a correct prediction."""
    Xs, ys = [], []
    for X, y, valid in source.fit_blocks(block_rows):
        X = np.array(X, np.float32)
        if valid is not None:
            X[~np.asarray(valid)] = np.nan
        Xs.append(X)
        ys.append(np.asarray(y))
    return np.concatenate(Xs), np.concatenate(ys)


def _fold_counts(fold_plans, sizes, X: np.ndarray, y: np.ndarray, classes, keys, run: dict) -> np.ndarray:
    """Each candidate's correct predictions (M,) summed over the folds: fold f (``sizes[f]`` rows of
    ``keys[0]``'s permutation) scores the plans ``fold_plans[f]``, run as charged on the other rows with
    ``keys[3 + f]`` split per candidate."""
    n, k, m = len(y), len(fold_plans), len(fold_plans[0])
    fold_of = np.empty(n, np.int64)
    fold_of[_permutation(keys[0], n)] = np.repeat(np.arange(k), sizes)
    correct = np.zeros(m, np.int64)
    for f in range(k):
        train, valid = fold_of != f, fold_of == f
        fits = workflow.run_plans(fold_plans[f], data.ArraySource(X[train], y[train]), list(noise.split(
            keys[3 + f], m)), classes, **run)
        correct += prediction.correct_counts([_predictor(fit) for fit in fits], classes,
                                             data.ArraySource(X[valid], y[valid]))
    return correct


def _predictor(fit: workflow.Fitted):
    """A fitted record's :func:`privlin.prediction.predicted_index`, for :func:`privlin.prediction.correct_counts`."""
    return functools.partial(prediction.predicted_index, fit.plan, fit.coef, fit.intercept,
                             values=fit.values)


def _permutation(key, n: int) -> np.ndarray:
    """A uniform permutation of ``range(n)`` from a privlin key (its 128 bits seed NumPy's generator)."""
    words = np.asarray(jax.random.key_data(key), np.uint32).ravel()
    return np.random.default_rng([int(w) for w in words]).permutation(n)


def _results(param_grid, noisy: np.ndarray, n: int) -> dict:
    """scikit-learn's ``cv_results_`` layout with the noisy scores only."""
    grid = list(ParameterGrid(param_grid))
    out = {"params": grid}
    for name in sorted({k for g in grid for k in g}):
        col = np.ma.masked_all(len(grid), dtype=object)
        for i, g in enumerate(grid):
            if name in g:
                col[i] = g[name]
        out[f"param_{name}"] = col
    out["noisy_correct"] = np.asarray(noisy, np.float64)
    out["mean_test_score"] = np.asarray(noisy, np.float64) / n
    order = np.argsort(-noisy, kind="stable")
    rank = np.empty(len(grid), np.int32)
    rank[order] = np.arange(1, len(grid) + 1)
    out["rank_test_score"] = rank
    return out
