"""Many private settings in one data pass: a whole privacy–accuracy curve for about the price of one fit.

A setting is a set of :class:`privlin.DPLinearClassifier` parameters, validated by the estimator and turned
into a plan by :func:`privlin.plan.make_plan`; :func:`privlin.runner.run` runs all plans together: plans of one
compiled form share one copy of the rows (vmapped), and ``adam1`` plans share one class-sum pass when the rows
are streamed.  So ``sweep(store, epsilon=e, method=m)`` trains exactly what ``privlin.fit(store, epsilon=e,
method=m)`` trains, and a record equals ``DPLinearClassifier(**record["params"], random_state=key).fit``.

Why it is honest
----------------
Every setting draws fresh noise from its own key (``privlin.noise.split`` of one 128-bit base key).  Keys are secret:
they are not returned unless ``return_keys=True`` (then :attr:`SweepResult.keys` holds them, apart from every record,
report and CSV, and every record says ``seeded``: whoever holds a key can subtract its noise).  Every record states
its own (ε, δ): the guarantee of releasing *that one model*.
Releasing several, or picking the best by looking at private data, costs more: :attr:`SweepResult.total_epsilon`
is the composition of every setting (what the ledger is charged, before any row is read),
:meth:`SweepResult.best` marks its pick ``private=False`` unless the evaluation split is public, and
:func:`privlin.selection.select_private` picks privately on a held-out split, with that cost accounted.
"""
from __future__ import annotations

import csv
import functools
import io
import itertools
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from dp_accounting import dp_event as _ev

from . import accounting, data, noise, prediction, workflow
from . import evaluation as _evaluation
from . import progress as _progress
from . import public as _public
from .defaults import DEFAULT_EPSILON
from .estimator import DPLinearClassifier
from .report import PrivacyLeakWarning
from .spelling import check_params

__all__ = ["sweep", "SweepResult", "PrivacyLeakWarning"]


# --------------------------------------------------------------------------- settings

def _grid(epsilon, grid: Mapping[str, Any]) -> list[dict]:
    """Cartesian product of every list-valued parameter (ε first), scalars shared."""
    axes = {"epsilon": list(epsilon) if isinstance(epsilon, Iterable) and not isinstance(epsilon, str) else [epsilon]}
    for name, value in grid.items():
        axes[name] = list(value) if isinstance(value, (list, tuple, np.ndarray)) and name != "classes" else [value]
    names = list(axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*(axes[n] for n in names))]


def _validated(params: Mapping) -> DPLinearClassifier:
    """The estimator of one setting, its parameters checked by the estimator's own constraints (a mistyped name
    first, with the closest parameter: :func:`privlin.spelling.check_params`)."""
    check_params(params)
    est = DPLinearClassifier(**params)
    est._validate_params()
    return est


# --------------------------------------------------------------------------- results

@dataclass
class SweepResult:
    """The outcome of :func:`sweep`: one record per setting, plus the models.

    Attributes
    ----------
    records : list of dict
        Per setting: method, epsilon (target), achieved_epsilon, delta, noise_multiplier,
        center_noise_multiplier, learning_rate (W's rate as run), steps, clip, center_share, scale_share,
        accountant, neighbouring, private, seeded, accuracy on ``eval_split`` (None without evaluation data),
        eval_split, curvature (the released bound, or None), radius (the released log₂ row norm, or None), values
        (every release's value by its name), params (the estimator parameters), plan, report.  Never a key.
    coef : list of ndarray (D', K)
        Per setting; D' = D, or D + 1 where the setting's rows carry the radial coordinate (``radius`` in its
        record: the released log₂ row norm, :mod:`privlin.releases.norms`).
    intercept : ndarray (S, K)
    classes : ndarray (K,)
        The public class list the labels were matched against (a store's: indices 0..K-1).
    class_names : ndarray (K,) or None
        A store's published names for ``classes`` where the class list came from the store: what :meth:`predict`
        returns, as a fitted model's ``classes_`` (:meth:`model`).
    values : list of dict
        Per setting, every release's value by its name (public: part of its model; also each record's
        ``values``); ``means`` and ``scalings`` are views of it (:func:`privlin.workflow.views`).
    means : list of (ndarray (D,) or None)
        The released noisy mean of each privately centered setting (public: part of its model).
    scalings : list of (privlin.releases.scaling.Scaling or None)
        The released map of each setting's scaling stage (public: part of its model).
    total_epsilon : float
        ε at ``total_delta`` of releasing **every** setting (composition): what was charged.
    total_delta : float
    eval_public : bool
        Whether the evaluation split was declared public (then picking by its accuracy is free).
    keys : list of ndarray (2, 2) uint32, or None
        Each setting's noise key, only with ``return_keys=True`` (kept out of the records, so no record, report or
        CSV carries one).
    """

    records: list[dict]
    coef: list = field(repr=False)
    intercept: np.ndarray = field(repr=False)
    classes: np.ndarray = field(repr=False)
    total_epsilon: float = math.nan
    total_delta: float = math.nan
    eval_public: bool = False
    means: list = field(default=None, repr=False)
    scalings: list = field(default=None, repr=False)
    keys: list | None = field(default=None, repr=False)
    fits: list | None = field(default=None, repr=False)  # privlin.workflow.Fitted per setting
    class_names: np.ndarray | None = field(default=None, repr=False)
    values: list | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.means is None:
            self.means = [None] * len(self.records)
        if self.scalings is None:
            self.scalings = [None] * len(self.records)
        if self.values is None:  # built by hand: settings whose plans release nothing (prediction reads values)
            self.values = [{} for _ in self.records]

    COLUMNS = ("method", "epsilon", "achieved_epsilon", "delta", "noise_multiplier", "center_noise_multiplier",
               "learning_rate", "steps", "clip", "center_share", "scale_share", "accuracy", "eval_split", "private",
               "seeded", "accountant", "neighbouring", "curvature", "radius")

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return self.table()

    def predict(self, i: int, X: np.ndarray) -> np.ndarray:
        """Labels (n,) predicted by setting ``i`` on features X (n, D) (preprocessed as in training): the store's
        class names where it published them (as :meth:`model`'s ``classes_``), else ``classes``."""
        return self._labels()[self._argmax(i, X)]

    def _labels(self) -> np.ndarray:
        """What :meth:`predict` returns values of: the store's class names, else ``classes``."""
        return self.classes if self.class_names is None else self.class_names

    def _argmax(self, i: int, X: np.ndarray) -> np.ndarray:
        """Index (n,) into ``classes`` of setting ``i``'s prediction on X (:func:`privlin.prediction.logits`)."""
        rec = self.records[i]
        return prediction.predicted_index(rec["plan"], np.asarray(self.coef[i]).T, self.intercept[i], X,
                                          values=self.values[i])

    def model(self, i: int) -> DPLinearClassifier:
        """Setting ``i`` as a fitted :class:`DPLinearClassifier` (predict, score, ``privacy_``)."""
        if self.fits is None:
            raise ValueError("this SweepResult holds no fitted records (it was built by hand, not by sweep())")
        est = DPLinearClassifier(**{**self.records[i]["params"], "classes": self.classes})
        return workflow.unpack(self.fits[i], est, ledger=False)

    def to_csv(self, path: str | os.PathLike | None = None, extra: Mapping[str, Any] | None = None) -> str:
        """CSV of the records (columns :attr:`COLUMNS`, then ``extra`` constants); written to ``path`` if given."""
        extra = dict(extra or {})
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=[*extra, *self.COLUMNS], extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in self.records:
            w.writerow({**extra, **r})
        text = buf.getvalue()
        if path is not None:
            with open(path, "w", newline="") as f:
                f.write(text)
        return text

    def table(self) -> str:
        """Plain-text table for a terminal (also the ``repr``)."""
        head = f"{'method':9} {'eps':>6} {'eps got':>8} {'sigma':>9} {'lr':>8} {'steps':>5} {'clip':>5} {'acc':>7}"
        lines = [head, "-" * len(head)]
        for r in self.records:
            acc = "-" if r["accuracy"] is None else f"{100 * r['accuracy']:.2f}%"
            eps = "inf" if r["epsilon"] is None or math.isinf(r["epsilon"]) else f"{r['epsilon']:g}"
            got = "inf" if math.isinf(r["achieved_epsilon"]) else f"{r['achieved_epsilon']:.3f}"
            lines.append(f"{r['method']:9} {eps:>6} {got:>8} {r['noise_multiplier']:>9.4g} {r['learning_rate']:>8.2g} "
                         f"{r['steps']:>5} {r['clip']:>5.3g} {acc:>7}")
        lines.append(f"releasing all {len(self.records)} settings: ε = {self.total_epsilon:.3f} at δ = "
                     f"{self.total_delta:g} (composition)")
        return "\n".join(lines)

    def best(self) -> dict:
        """The record with the highest evaluation accuracy.

        Choosing by accuracy on a *private* split leaks that split: the returned record then carries
        ``private=False`` and a :class:`PrivacyLeakWarning` is emitted.  Use
        :func:`privlin.selection.select_private` for a private choice.
        """
        scored = [i for i, r in enumerate(self.records) if r["accuracy"] is not None]
        if not scored:
            raise ValueError("no setting was evaluated")
        i = max(scored, key=lambda j: self.records[j]["accuracy"])
        rec = dict(self.records[i], index=i)
        if not self.eval_public:
            warnings.warn("best() chose by accuracy on a private evaluation split: the chosen number is tuned on "
                          "that split and is not a private result; use privlin.selection.select_private",
                          PrivacyLeakWarning, stacklevel=2)
            rec["private"] = False
            rec["selected_on"] = f"{rec['eval_split']} (not private)"
        return rec


# --------------------------------------------------------------------------- the sweep

def correct_counts(result: SweepResult, source: data.Source, block_rows: int = 65536) -> np.ndarray:
    """Correct predictions (S,) of every setting on ``source``, one pass over it: privlin's one scoring rule
    (:func:`privlin.prediction.correct_counts`: labels matched as a fit matches them, a store's labels as its
    names where those are the settings' labels, a non-finite row never correct and never an error)."""
    predictors = [functools.partial(result._argmax, s) for s in range(len(result))]
    return prediction.correct_counts(predictors, result._labels(), source, block_rows)


def sweep(data_, epsilon=DEFAULT_EPSILON, *, settings: Sequence[Mapping] | None = None, split: str = "train",
          eval_data=None, eval_split: str | None = "test", eval_public: bool = False, random_state=None,
          budget=None, ledger=None, return_keys: bool = False, progress: bool = True, eps=None, public=None,
          **grid) -> SweepResult:
    """Train every setting of a grid privately, sharing data passes, and evaluate each.

    Parameters
    ----------
    data_ : stores.FeatureStore, store path/URL, stores.Split or (X (n, D), y (n,))
        The private training data.
    epsilon : float or sequence of float, default=privlin.plan.DEFAULT_EPSILON
        Target ε values (one axis of the grid); ``math.inf`` adds the non-private baseline.  ``eps=`` is an
        alias that replaces it.
    settings : sequence of dict, optional
        Explicit settings (estimator parameters each) instead of a grid.
    split : str
        Training split when ``data_`` is a store.
    eval_data : like ``data_``, optional
        Evaluation rows; default: split ``eval_split`` of the same store (None: no evaluation).
    eval_public : bool
        Declare the evaluation split public (then it is not charged and :meth:`SweepResult.best` is free).  Test
        splits are usually private: leave it False, and the evaluation split pays for its exact accuracies as a
        non-private release on its ledger (:mod:`privlin.evaluation`; any cap refuses it before a row is read).
    random_state : None, int or jax key
        Base key; setting s uses ``privlin.noise.split(key, S)[s]``.  None: 128 bits of OS entropy.
    budget, ledger
        As for :class:`DPLinearClassifier`: the composition of every setting is charged before any row is read.
    return_keys : bool
        Return each setting's key in :attr:`SweepResult.keys` (then the records say ``seeded``).
    progress : bool, default=True
        Show progress on stages that run more than a few seconds (stderr: compiling, settings done, passes over
        the store, evaluation; :mod:`privlin.progress`).
    public : like ``DPLinearClassifier(public=...)``, optional
        Public rows whose statistics every setting is given (:mod:`privlin.public`); else the settings' own
        ``public`` parameter (one for all).
    **grid
        :class:`DPLinearClassifier` parameters, each a scalar or a list (Cartesian product): ``method``,
        ``learning_rate``, ``steps``, ``clip``, ``center``, ``classes``, ...

    Returns
    -------
    SweepResult
    """
    # validate: public facts only
    settings = _settings(epsilon if eps is None else eps, settings, grid)
    ests = [_validated(s) for s in settings]
    source, evaluation = data.as_source(data_, split), _evaluation_source(data_, eval_data, eval_split)
    _check(ests, source, evaluation, secret=random_state is None and not return_keys)
    if evaluation is not None:  # the evaluation split pays too (or is declared public): its cap refuses first
        _evaluation.check_exact(evaluation, public=eval_public, mechanism="privlin.sweep/evaluation")
    info = noise.make_key(random_state)
    seeded = info.seeded or return_keys
    # plan and charge, in sequence, before any row is read: every setting composed, then the evaluation split
    pub = _public.resolve(_public.of_settings(public, ests), source, audit=ests[0].public_audit, budget=budget,
                          ledger=ledger)
    params, charge, given = _public.inputs(pub, [e.get_params() for e in ests], _charge(source, seeded), source,
                                           block_rows=ests[0].block_rows, memory_limit=ests[0].memory_limit,
                                           verbose=progress)
    classes, plans, leaks, led = workflow.plans_for(source, params, classes=ests[0].classes, budget=budget,
                                                    ledger=ledger, charge=charge, stacklevel=4, given=tuple(given))
    eval_charge = None if evaluation is None else _evaluation.charge_exact(
        evaluation, public=eval_public, mechanism="privlin.sweep/evaluation", params={"settings": len(plans)})
    # run
    keys = noise.split(info.key, len(settings))
    fits = workflow.run_plans(plans, source, list(keys), classes, seeded=seeded, leaks=leaks, ledger=led,
                              names=workflow.class_names(source, ests[0].classes), block_rows=ests[0].block_rows,
                              memory_limit=ests[0].memory_limit, verbose=progress, report_ledger=False, given=given,
                              public=pub)
    result = _result(fits, settings, ests, keys, seeded=seeded, eval_public=eval_public, return_keys=return_keys)
    # evaluate
    if evaluation is not None:
        with _progress.stage(f"evaluating {len(result.records)} settings on {evaluation.n} rows", progress):
            acc = correct_counts(result, evaluation) / evaluation.n_valid  # a skipped test image has no prediction
        for i, rec in enumerate(result.records):
            rec["accuracy"], rec["eval_split"], rec["eval_charge"] = float(acc[i]), (eval_split or "eval"), eval_charge
    return result


def _settings(epsilon, settings, grid: Mapping[str, Any]) -> list[dict]:
    """The settings of a sweep: the grid's (:func:`_grid`), or each explicit one over the grid's shared parameters."""
    settings = _grid(epsilon, grid) if settings is None else [{**grid, **dict(s)} for s in settings]
    if not settings:
        raise ValueError("no settings to train")
    return settings


def _check(ests, source: data.Source, evaluation: data.Source | None, *, secret: bool) -> None:
    """The sweep's public checks: one class list and relation, a held-out evaluation split with rows, secure
    mode's secret seed."""
    if evaluation is not None and source.same_rows(evaluation):
        raise ValueError("the evaluation rows are the training rows: their accuracy is not private (it is released "
                         "without noise). Evaluate on a held-out split, or pass eval_split=None")
    if evaluation is not None and evaluation.n_valid == 0:
        raise ValueError("the evaluation split has no rows")
    if len({repr(e.classes) for e in ests}) > 1:
        raise ValueError("every setting of a sweep must use the same classes")
    if len({e.neighbouring for e in ests}) > 1:
        raise ValueError("every setting of a sweep must use one neighbouring relation")
    if any(e.secure_mode for e in ests) and not secret:
        raise ValueError("secure_mode settings draw all randomness from os.urandom: leave random_state=None "
                         "and return_keys=False")


def _charge(source: data.Source, seeded: bool):
    """The sweep's ledger charge: the composition of every setting, as one entry."""
    def charge(led, plans):
        led.charge(_ev.ComposedDpEvent([p.dp_event() for p in plans]),
                   mechanism=f"privlin.sweep/{'+'.join(sorted({p.method for p in plans}))}",
                   epsilon=_total(plans), delta=max(p.delta for p in plans),
                   params={"settings": len(plans), "epsilons": [str(p.epsilon) for p in plans],
                           "n": source.n, "seeded": bool(seeded)}, neighbouring=plans[0].neighbouring)
    return charge


def _result(fits, settings, ests, keys, *, seeded: bool, eval_public: bool, return_keys: bool) -> SweepResult:
    """The sweep's result: the models and one record per setting (accuracy not yet filled in)."""
    plans = [f.plan for f in fits]
    total_eps, total_delta = _total(plans), max(p.delta for p in plans)
    result = SweepResult([], [np.asarray(f.coef.T, np.float32) for f in fits],
                         np.stack([np.asarray(f.intercept, np.float32) for f in fits]), fits[0].classes, total_eps,
                         total_delta, eval_public, [f.mean for f in fits], [f.scaling for f in fits], fits=fits,
                         class_names=fits[0].class_names, values=[f.values for f in fits])
    if return_keys:
        result.keys = list(noise.key_data(keys))
    for i, (f, s) in enumerate(zip(fits, settings)):
        p, target = f.plan, ests[i].epsilon
        rec = {"method": p.method, "epsilon": math.inf if target is None and not p.private else target,
               "achieved_epsilon": p.epsilon, "delta": p.delta, "noise_multiplier": p.sigma,
               "center_noise_multiplier": p.sigma_center if p.centered else None,
               "learning_rate": p.learning_rates_after(f.curvature)[0],
               "steps": p.steps, "clip": p.clip, "center_share": p.center_share, "scale_share": p.scale_share,
               "accountant": p.accountant, "curvature": f.curvature, "radius": f.radius, "values": f.values,
               "neighbouring": p.neighbouring, "private": p.private, "seeded": bool(seeded), "accuracy": None,
               "eval_split": None, "eval_charge": None, "params": dict(s), "plan": p, "report": f.report}
        result.records.append(rec)
    return result


def _total(plans) -> float:
    """ε at the largest δ of releasing every plan (PLD composition)."""
    if any(not p.private for p in plans):
        return math.inf
    return accounting.compose_epsilon([p.dp_event() for p in plans], max(p.delta for p in plans),
                                      neighbouring=plans[0].neighbouring)


def _evaluation_source(data_, eval_data, eval_split):
    if eval_data is not None:
        return data.as_source(eval_data, eval_split)
    if eval_split is None or isinstance(data_, tuple):
        return None
    store = data.open_store(data_) if isinstance(data_, (str, os.PathLike)) else data_
    if not hasattr(store, "splits"):
        return None
    if eval_split not in store.splits:
        raise ValueError(f"eval_split {eval_split!r} is not in the store; it has {list(store.splits)}")
    return data.as_source(store, eval_split)
