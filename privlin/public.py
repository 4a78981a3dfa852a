"""Public rows as a free input: the plan's preprocessing statistics computed from rows the user declares public,
so the budget they would have taken goes to training.

A public source is rows without labels (no statistic of the chain reads a label): an array ``X_pub``, the name of
another split of the private rows' store (``public="public"``), another store or path (its ``"public"`` split, or
its only one), ``(store, split)``, a ``stores.Split`` or a :class:`privlin.data.Source`.  :func:`resolve` turns it
into a :class:`Public`, refusing one that shares an item with the private rows (by the stores' content identity,
``stores.items``; where a side has none, arrays, it warns and says how to check: ``public_audit=True`` runs the
near-duplicate audit :func:`privlin.knn.overlap_audit` in the same call).

The statistics are exactly what the plan's releases would release, computed by the same code without noise: a
non-private copy of the plan's chain (every σ = 0) runs on the public rows through the one runner
(:func:`statistics`), and the released values of the releases the public rows can give (:meth:`Public.given`)
are then given to the private fit, uncharged and used as released ones.  Public rows are never charged and never
read as private rows; the report and the ledger entry name them (:meth:`Public.describe`).

Whether they fit the private rows is checked, paid (:mod:`privlin.releases.public_check`): a noisy count of the
private rows within the public radius, a release at the head of the plan, charged with it; where it fails the fit
runs the private defaults' plan instead (:meth:`Public.inputs`, :func:`checked`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import warnings
from typing import Any, Callable, Mapping, Optional

import numpy as np

from . import accounting, data, noise, runner
from .defaults import PARAMS
from .releases import PROJECT, project, public_check, scaling
from .public_fallback import Check, Given, charging_checked
from .plan import START, Plan, make_plan
from .report import PrivacyLeakWarning

__all__ = ["Public", "resolve", "of_settings", "inputs", "statistics", "exact_plan", "PUBLIC_SPLIT", "SECOND_MOMENT",
           "PRIVATE_ONLY"]

#: The split of a store (another one, or a path) that ``public=store`` reads when the store has several.
PUBLIC_SPLIT = "public"
#: Releases that sum (d', d') second moments of the rows: given from the public rows only where they resolve one
#: (:meth:`Public.given`); otherwise they stay private releases, as without a public source.
SECOND_MOMENT = ("whiten",)
#: Releases never given: the curvature bound sets the training's step size, and a bound measured on rows of another
#: distribution could let the private training diverge; it stays a private release (its small share).
PRIVATE_ONLY = ("curvature",)


def _content_identity(item_bytes: np.ndarray) -> str:
    """The public rows' content identity: sha256 of their sorted, distinct items (32 hex characters)."""
    return hashlib.sha256(np.unique(np.asarray(item_bytes, "S32")).tobytes()).hexdigest()[:32]


def _items_of(source: data.Source) -> Optional[np.ndarray]:
    """Every row's item (``S32``) of a store split, None where the rows carry no content identity (arrays)."""
    split = getattr(source, "split", None)
    return None if split is None else np.asarray(split.item_bytes(), "S32")


class _Unlabelled(data.Source):
    """The public rows as the runner reads them: every row labelled with the first class (no statistic of the
    chain reads a label); N is the count of rows that have features (public, so counted)."""

    in_memory = False

    def __init__(self, source: data.Source, n: int):
        self.source, self.n, self.dim = source, int(n), source.dim
        self.n_local = self.n_local_max = source.n_local_max
        self.itemsize, self.finite = source.itemsize, source.finite
        self.in_memory, self.description = source.in_memory, source.description

    def fit_blocks(self, rows: int, page_locked: bool = False):
        for X, y, valid in self.source.fit_blocks(rows, page_locked=page_locked):
            yield X, np.zeros(len(y), np.int64), valid

    def block_count(self, rows: int) -> int:
        return self.source.block_count(rows)

    def block_size(self, rows: int) -> int:
        return self.source.block_size(rows)


@dataclasses.dataclass(frozen=True, eq=False)
class Public:
    """A resolved public source.

    Attributes
    ----------
    source : privlin.data.Source
        Its rows (labels never read).
    n : int
        Rows that have features (a store's skipped rows are not counted: public, so counted exactly).
    identity : str or None
        Content identity: sha256 of its sorted distinct items (32 hex characters); None for arrays.
    where : str
        What it is: ``"store PATH, split 'public'"`` or ``"array"``.
    audit : privlin.knn.OverlapReport or None
        The near-duplicate audit against the private rows, where asked for (``public_audit``).
    labelled : bool
        Whether its labels may be read (``public=(X_pub, y_pub)``, or a store split): for ``public_start``.
    private_classes : tuple or None
        The class names the private rows' store publishes (public), which a store's public labels must share.
    """

    source: data.Source
    n: int
    identity: Optional[str]
    where: str
    audit: Any = None
    labelled: bool = False
    private_classes: Optional[tuple] = None

    def describe(self) -> str:
        """The public source as the report and the ledger entry name it."""
        if self.identity is None:
            return f"array of {self.n} rows, no content identity"
        return f"{self.where}: {self.n} rows, items sha256 {self.identity}"

    def given(self, params: Mapping[str, Any], n: int, dim: int) -> tuple:
        """Names of the releases the public rows give to a fit of ``DPLinearClassifier(**params)`` on N = ``n``
        rows of dimension ``dim``, in the order they run: every release the plan makes without noise (its ε = ∞
        twin, so the same at every ε: a release too noisy to make privately is still given), the public subspace
        where ``params["public_rank"]`` is a resolved rank ≥ 1 (:meth:`ranked`), but :data:`PRIVATE_ONLY` and,
        where the public rows are fewer than the model's inputs d' (their (d', d') second moment is rank-deficient:
        whitening by it amplifies every direction they miss) or the plan's own rule cannot resolve it at σ = 0
        (:func:`privlin.scaling.whitening_resolves`), :data:`SECOND_MOMENT`: those stay private releases, made or
        not as without a public source.  Public facts only."""
        projects = _rank(params) > 0
        twin = make_plan({**params, "epsilon": math.inf, "noise_multiplier": None, "center_noise_multiplier": None},
                         n=n, dim=dim, n_classes=None, given=(PROJECT.name,) if projects else ())
        resolves = self.n >= twin.model_dim and scaling.whitening_resolves(self.n, twin.model_dim, 0.0)
        return tuple(r.name for r in twin.ran if r.name == PROJECT.name
                     or (r.name not in PRIVATE_ONLY and (resolves or r.name not in SECOND_MOMENT)))

    def ranked(self, params: Mapping[str, Any], *, n: int, dim: int, **run) -> dict:
        """``params`` with ``public_rank`` resolved to the rank of the public subspace the rows are projected onto
        (:mod:`privlin.releases.project`; 0: none): where given, checked against the most the public rows can name
        (:func:`~privlin.releases.project.largest_rank`); None: :func:`~privlin.releases.project.choose_rank` of
        the public rows' spectrum (the subspace's value at the largest rank, computed by :func:`statistics` up to
        the projection), or 0 where the (d', d') second moment costs too much
        (:func:`privlin.releases.scaling.second_moment_affordable`).  Public rows only."""
        want = params.get("public_rank")
        if want is not None and _rank(params) == 0:
            return {**params, "public_rank": 0}
        before = make_plan({**params, "epsilon": math.inf, "noise_multiplier": None, "center_noise_multiplier": None,
                            "public_rank": 0}, n=n, dim=dim, n_classes=None)
        d_in, top = before.model_dim, project.largest_rank(self.n, before.model_dim)
        if not scaling.second_moment_affordable(self.n, d_in):
            if want is None:
                return {**params, "public_rank": 0}
            raise ValueError(f"public_rank={want}: a public subspace of {d_in}-d rows from {self.n} public rows "
                             "costs more than privlin computes (privlin.releases.scaling.second_moment_affordable)")
        if want is not None:
            if want > top:
                raise ValueError(f"public_rank={want}: {self.n} public rows of {d_in} inputs name at most {top} "
                                 "directions")
            return {**params, "public_rank": int(want)}
        widest = {**params, "public_rank": top, "recenter": False}
        plan = make_plan(widest, n=n, dim=dim, n_classes=None, given=self.given(widest, n, dim))
        energy = statistics(plan, self, upto=PROJECT.name, **run)[PROJECT.name].energy
        return {**params, "public_rank": project.choose_rank(energy, self.n, d_in)}

    def prepare(self, params_list, *, n: int, dim: int, block_rows: int = 65536, memory_limit: int = 2**30,
                verbose: bool = False) -> tuple[list, dict]:
        """``(params_list, given)`` for fits of ``params_list`` on N = ``n`` rows of dimension ``dim``: the
        parameters as they run (re-centering rounds off where the centre is given: the public centre is exact,
        and rounds released before it would move the rows it was computed on) and ``{name: value}`` of every
        release the public rows give (:meth:`given`), computed by :func:`statistics`.  One value per release for
        every setting: settings whose public releases differ are refused (fit them apart)."""
        run = dict(block_rows=block_rows, memory_limit=memory_limit, verbose=verbose)
        params_list = _ranked(self, params_list, n=n, dim=dim, **run)
        names = {self.given(p, n, dim) for p in params_list}
        if len(names) != 1:
            raise ValueError(f"these settings take different public statistics ({sorted(names)}): fit them apart "
                             "(one value per release and public source)")
        (names,) = names
        if "center" in names:
            if any(p.get("recenter") for p in params_list):
                raise ValueError("recenter=True re-centres the private rows before their centering; with the public "
                                 "centre (exact) there is nothing to re-centre: leave recenter=None")
            params_list = [{**p, "recenter": False} for p in params_list]
        plan = make_plan(params_list[0], n=n, dim=dim, n_classes=None, given=names)
        values = statistics(plan, self, **run)
        return params_list, {**{name: values[name] for name in names}, **start_rows(self, params_list, **run)}

    def inputs(self, params_list, charge: Callable, *, n: int, dim: int, block_rows: int = 65536,
               memory_limit: int = 2**30, verbose: bool = False, check: bool = True) -> tuple[list, Callable, dict]:
        """What a fit of ``params_list`` takes with this source: ``(params_list, charge, given)`` — the parameters
        and given values of :meth:`prepare`, and ``charge`` naming the source in the ledger entry
        (:meth:`charging`).  With ``check`` (and ``charge``: the check is a release, charged with its plan), each
        setting the check applies to (:func:`privlin.releases.public_check.applies`) takes it: its parameters ask
        for the budget the check leaves, ``charge`` charges the check with the costlier of the two plans that
        may follow it, and ``given`` (a :class:`Given`) carries what :func:`checked` needs to release the check
        and choose the plan."""
        original = list(params_list)
        params_list, given = self.prepare(params_list, n=n, dim=dim, block_rows=block_rows,
                                          memory_limit=memory_limit, verbose=verbose)
        if check and charge is not None and given:
            checks = _checks(self, original, params_list, n=n, dim=dim)
            if any(c is not None for c in checks):
                params_list = [p if c is None else c.rest_params for p, c in zip(params_list, checks)]
                given = Given(given, checks=checks)
                charge = charging_checked(charge, checks)
        return params_list, self.charging(charge, tuple(given), checked=bool(getattr(given, "checks", ()))), given

    def charging(self, charge: Callable, given, checked: bool = False) -> Callable:
        """``charge(ledger, plans)`` whose ledger entry also names this public source (:meth:`ledger_params`)
        and, where its settings take the public check, the check's rule."""
        extra = self.ledger_params(tuple(given))
        if checked:
            extra["public_check"] = (f"{public_check.CHECK_SHARE:g} of μ²: noisy count of private rows within the "
                                     f"public radius ({public_check.QUANTILE:g} quantile), private defaults' plan "
                                     "where it fails")

        def charge_naming_the_source(led, plans):
            return charge(_Naming(led, extra), plans)
        return charge_naming_the_source

    def ledger_params(self, given) -> dict:
        """What the ledger entry of a fit keeps about its public source (public facts only)."""
        out = {"public_source": self.describe(), "public_releases": [g for g in given if g != START],
               "public_treated_as": "public: not charged, never read as private rows"}
        if START in given:
            out["public_start"] = self.start_note()
        return out

    def start_note(self, clip: bool = False) -> str:
        """What the report and the ledger entry say of the DP steps' start (``public_start``; ``clip``: with
        ``public_clip``)."""
        note = (f"training started from a fit on the public rows {self.describe()} (non-private L2 logistic "
                "regression in the model's coordinates, regularisation by cross-validation on them; not charged)")
        if clip:
            note += (", each training gradient multiplied before the clip by the clip over the public rows' held-out "
                     "gradient norm at the start (public_clip; σ and the clip unchanged)")
        return note

    def annotate(self, report, given, failed: bool = False, clip: bool = False):
        """``report`` (a :class:`privlin.report.PrivacyReport`) with the public statistics in its notes (``given``:
        their names, or ``{name: value}``, whose public subspace the note names with its rank); ``failed``: the
        fit's public check failed, its statistics were not used; ``clip``: the plan's ``public_clip``."""
        if failed:
            note = (f"public source {self.describe()}: its statistics failed the public check and were not used "
                    "(the private defaults' plan ran)")
            if START in given:
                note += "; " + self.start_note(clip)
            return dataclasses.replace(report, notes="; ".join(x for x in (report.notes, note) if x))
        names = [g for g in given if g != START]
        note = (f"public statistics ({', '.join(names)}) computed without noise from {self.describe()}, treated "
                "as public: not charged, their rows never read as private")
        subspace = given.get(PROJECT.name) if isinstance(given, Mapping) else None
        if subspace is not None:
            note += "; " + project.describe(subspace)
        if START in given:
            note += "; " + self.start_note(clip)
        return dataclasses.replace(report, notes="; ".join(x for x in (report.notes, note) if x))


def _rank(params: Mapping[str, Any]) -> int:
    """The resolved ``public_rank`` of ``params`` (None and 0: no projection); refuses what is not a rank."""
    rank = params.get("public_rank")
    if rank is None:
        return 0
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 0:
        raise ValueError(f"public_rank must be None (the rule of privlin.releases.project), 0 (no projection) or "
                         f"a number of directions ≥ 1; got {rank!r}")
    return int(rank)


def _ranked(public: Public, params_list, **kw) -> list:
    """Every setting's parameters with its ``public_rank`` resolved (:meth:`Public.ranked`); the rule's spectrum is
    computed once (settings whose public statistics differ are refused anyway), and settings whose resolved ranks
    differ are refused (one value of the subspace per public source)."""
    rule, out = None, []
    for p in params_list:
        if p.get("public_rank") is None:
            rule = public.ranked(p, **kw)["public_rank"] if rule is None else rule
            out.append({**p, "public_rank": rule})
        else:
            out.append(public.ranked(p, **kw))
    if len({p["public_rank"] for p in out}) > 1:
        raise ValueError(f"these settings project onto public subspaces of different ranks "
                         f"({sorted({p['public_rank'] for p in out})}): fit them apart, or give one public_rank")
    return out


class _Naming:
    """A ledger whose :meth:`charge` adds ``extra`` to the entry's parameters (anything else: the ledger's)."""

    def __init__(self, ledger, extra: dict):
        self._ledger, self._extra = ledger, extra

    def charge(self, event, *, params=None, **kw):
        return self._ledger.charge(event, params={**(params or {}), **self._extra}, **kw)

    def __getattr__(self, name):
        return getattr(self._ledger, name)


# ----------------------------------------------------------------------------- resolving what the user passed

def resolve(public, private: data.Source, *, audit=False, budget=None, ledger=None,
            stacklevel: int = 3) -> Optional[Public]:
    """The :class:`Public` of what the user passed as ``public`` for the private rows ``private`` (None: None).

    Parameters
    ----------
    public : None, array (m, d), str, path, (store, split), stores.Split, stores.FeatureStore, privlin.data.Source
        A string names a split of ``private``'s store where it has one by that name, else a store path or URL
        (its :data:`PUBLIC_SPLIT` split, or its only split).
    audit : bool or float
        Run the near-duplicate audit (:func:`privlin.knn.overlap_audit`, at this cosine threshold, or its
        default with True) of the public rows against the private ones: a non-private release about the private
        rows, charged as such on their ledger (a capped ledger refuses it); a private row with a public twin
        refuses the fit.
    budget, ledger
        The private rows' (for the audit's charge).

    Raises
    ------
    ValueError
        The public rows are the private ones, share an item with them, have another dimension or a non-finite value,
        or (with ``audit``) have a near-duplicate among them.
    """
    if public is None:
        return None
    if isinstance(public, Public):
        return public
    source, where = _source(public, private)
    if source.dim != private.dim:
        raise ValueError(f"the public rows have dimension {source.dim}, the private rows {private.dim}: give "
                         "features of the same backbone and head")
    if source.same_rows(private):
        raise ValueError(f"the public source is the private rows ({where}): give rows that are public")
    items = _items_of(source)
    _check_disjoint(items, _items_of(private), where, stacklevel + 1)
    n = _valid_rows(source)
    if n < 1:
        raise ValueError(f"the public source {where} has no rows")
    report = None
    if audit is not False and audit is not None:
        report = _audit(source, private, audit, budget=budget, ledger=ledger)
    published = private.published_classes()
    return Public(source, n, None if items is None else _content_identity(items), where, report,
                  labelled=where != "array", private_classes=None if published is None else tuple(published))


def of_settings(public, estimators):
    """The public source of a call that fits several settings: ``public`` where given, else the settings' own
    ``public`` parameter, which they must share (one public source per call)."""
    if public is not None:
        return public
    first = estimators[0].public
    if any(e.public is not first for e in estimators[1:]):
        raise ValueError("the settings name different public sources: one public source per call (fit them apart)")
    return first


def inputs(public: Optional[Public], params_list, charge: Callable, source: data.Source, **run) -> tuple:
    """``(params_list, charge, given)`` of a fit on ``source`` with the public source ``public``
    (:meth:`Public.inputs`; ``run``: its block_rows, memory_limit and verbose), or as they are without one.  The
    public check is made where there is a ``charge`` to compose it in (a caller that charges its own composed
    event, the grid search, passes None: its fits take none)."""
    if public is None:
        return list(params_list), charge, {}
    return public.inputs(params_list, charge, n=source.n, dim=source.dim, check=charge is not None, **run)


def _source(public, private: data.Source) -> tuple[data.Source, str]:
    """``(source, what it is)`` of every form ``public`` may take."""
    if isinstance(public, data.Source):
        return public, public.description
    if isinstance(public, tuple) and len(public) == 2 and isinstance(public[1], str):
        src = data.as_source(public[0], public[1])
        return src, src.description
    store = getattr(private, "store", None)
    if isinstance(public, str) and store is not None and public in store.splits:
        src = data.SplitSource(store[public], store)
        return src, src.description
    if isinstance(public, (str, os.PathLike)) or data.is_store_like(public):
        src = _store_source(public)
        return src, src.description
    if isinstance(public, tuple) and len(public) == 2:
        return _labelled_arrays(*public), "labelled array"
    X = np.asarray(public)
    if X.ndim != 2 or not np.issubdtype(X.dtype, np.number):
        raise TypeError(f"public must be rows (m, d), a split name, a store or (store, split); got "
                        f"{type(public).__name__} of shape {X.shape}")
    X = X if np.issubdtype(X.dtype, np.floating) else X.astype(np.float32)
    if not np.isfinite(X).all():
        bad = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
        raise ValueError(f"the public rows hold a NaN or inf value (row {bad}): public rows are not null rows, fix "
                         "or drop it")
    return data.ArraySource(X, np.zeros(X.shape[0], np.int64)), "array"


def _labelled_arrays(X, y) -> data.Source:
    """``public=(X_pub, y_pub)``: public rows with their labels (read only for ``public_start``)."""
    src, _ = _source(X, None)
    y = data.row_labels(y)
    if y.shape != (src.n,):
        raise ValueError(f"public=(X_pub, y_pub): {src.n} rows but labels of shape {y.shape}")
    return data.ArraySource(np.asarray(src.X), y)


def start_rows(public: Public, params_list, *, block_rows: int = 65536, memory_limit: int = 2**30,
               verbose: bool = False) -> dict:
    """``{START: (X, class index, mask)}``: the labelled public rows whose fit starts the DP steps where the settings
    ask for it (``public_start``; :func:`privlin.chain.public_start`), else ``{}``.  The class list is public: the
    settings' ``classes``, else the one the private rows' store publishes (public labels are indices into it; a
    public store must publish the same); never read from private rows.  Public facts only."""
    wants = {bool(p.get("public_start")) for p in params_list}
    if wants == {False}:
        return {}
    if len(wants) > 1:
        raise ValueError("some settings start from the public rows' fit and some do not: fit them apart")
    if not public.labelled:
        raise ValueError("public_start=True reads the public rows' labels: pass public=(X_pub, y_pub) or a store "
                         "split (unlabelled rows give statistics only)")
    given = {None if p.get("classes") is None else tuple(np.unique(np.asarray(p["classes"]))) for p in params_list}
    if len(given) > 1:
        raise ValueError("the settings name different class lists: fit them apart")
    (classes,) = given
    if classes is not None:
        classes = np.asarray(classes)
    elif public.private_classes is not None:
        theirs = public.source.published_classes()
        if theirs is not None and tuple(theirs) != public.private_classes:
            raise ValueError(f"the public store's classes {list(theirs)} are not the private store's "
                             f"{list(public.private_classes)}: public_start needs one class list")
        classes = np.arange(len(public.private_classes))
    else:
        raise ValueError("public_start=True needs a public class list: pass classes=... (the start never reads the "
                         "class list from the private rows)")
    from .rows import Rows

    X, idx, mask = Rows(public.source, classes, block_rows, verbose).load()
    unknown = public.n - int(np.asarray(mask).sum())
    if unknown:
        raise ValueError(f"{unknown} of the {public.n} public rows have a label outside the class list "
                         f"{classes.tolist()}: fix or drop them (public rows are never null rows)")
    return {START: (X, idx, mask)}


def _store_source(public) -> data.Source:
    """A store (path, URL or object) or one of its splits: its :data:`PUBLIC_SPLIT` split, or its only one."""
    import stores

    if isinstance(public, stores.Split):
        return data.SplitSource(public)
    store = data.open_store(public) if isinstance(public, (str, os.PathLike)) else public
    if not isinstance(store, stores.FeatureStore):
        raise TypeError(f"public must be rows, a split name, a store or (store, split); got {type(public).__name__}")
    splits = list(store.splits)
    name = PUBLIC_SPLIT if PUBLIC_SPLIT in splits else splits[0] if len(splits) == 1 else None
    if name is None:
        raise ValueError(f"which split of {store.url!r} is public? it has {splits}: pass (store, split)")
    return data.SplitSource(store[name], store)


def _check_disjoint(public_items, private_items, where: str, stacklevel: int) -> None:
    """Refuse public rows that share an item with the private rows; warn where a side has no content identity."""
    if public_items is None or private_items is None:
        side = "the public rows" if public_items is None else "the private rows"
        warnings.warn(f"{side} carry no content identity (arrays): privlin cannot check that the public rows share "
                      "no item with the private ones; pass store splits (their items are compared), or check with "
                      "public_audit=True (privlin.knn.overlap_audit: near-duplicates by cosine similarity, a "
                      "non-private release about the private rows)", PrivacyLeakWarning, stacklevel=stacklevel)
        return
    shared = np.intersect1d(public_items, private_items)
    if shared.size:
        raise ValueError(f"the public source {where} shares {shared.size} items with the private rows (e.g. "
                         f"{shared[0].decode()}): rows that are private cannot be public; drop them from it")


def _valid_rows(source: data.Source) -> int:
    """Rows that have features: a store split's rows less its skipped ones (public, so counted)."""
    split = getattr(source, "split", None)
    return int(np.asarray(split.valid_mask()).sum()) if split is not None else int(source.n)


def _audit(source, private, audit, *, budget, ledger):
    """:func:`privlin.knn.overlap_audit` of the public rows against the private ones; a twin refuses the fit."""
    from . import knn

    kw = {} if audit is True else {"threshold": float(audit)}
    report = knn.overlap_audit(source, private, budget=budget, ledger=ledger, **kw)
    if report.n_with_twin:
        raise ValueError(f"public_audit: {report.n_with_twin} private rows have a near-duplicate among the public "
                         f"rows (cosine >= {report.threshold:g}): they are not public; the audit was charged as a "
                         "non-private release on the private rows")
    return report


# ----------------------------------------------------------------------------- the statistics

def exact_plan(plan: Plan, n: int, upto: Optional[str] = None) -> Plan:
    """A non-private copy of ``plan`` for ``n`` public rows: every release it uses (:attr:`Plan.ran`, given ones
    included, but the public check; with ``upto``, those up to the release of that name) in its chain at σ = 0 (the centering in one
    stage: at σ = 0 a refining stage has nothing to refine), then one cheap training step whose model is not
    used."""
    ran = tuple(r for r in plan.ran if r.name != public_check.NAME)  # the check is about the private rows
    if upto is not None:
        ran = ran[:1 + [r.name for r in ran].index(upto)]
    chain = tuple((dataclasses.replace(r, parts=1) if r.name == "center" else r, 0.0) for r in ran)
    ceiling = plan.learning_rate_ceiling if math.isfinite(plan.learning_rate_ceiling) else plan.learning_rate
    return dataclasses.replace(plan, learning_rate_ceiling=ceiling, n=int(n), n_classes=2, epsilon=math.inf,
                               public_start=False, public_clip=False, average=0.0,
                               accountant="none", sigma=0.0,
                               method="adam1", steps=1, sample_rate=1.0, optimizer="adam", loss="sigmoid",
                               secure_mode=False, chain=chain, given=(), class_weight=None)


def statistics(plan: Plan, public: Public, *, upto: Optional[str] = None, block_rows: int = 65536,
               memory_limit: int = 2**30, verbose: bool = False) -> dict:
    """``{release name: value}`` of every release of ``plan``'s chain (up to ``upto``) as :func:`exact_plan`
    releases it on the public rows, run by :func:`privlin.runner.run` (streamed where ``memory_limit`` says so, as
    a private fit)."""
    exact = exact_plan(plan, public.n, upto)
    key = noise.make_key(np.zeros((2, 2), np.uint32)).key  # σ = 0 everywhere: no noise it draws is used
    (released,) = runner.run([exact], _Unlabelled(public.source, public.n), [key],
                             np.arange(2), block_rows=block_rows, memory_limit=memory_limit, verbose=verbose)
    return dict(released.values)


# ----------------------------------------------------------------------------- the public check

def _checks(public: Public, original, prepared, *, n: int, dim: int) -> list:
    """Per setting, its :class:`Check`, or None where it takes none (:func:`public_check.applies`)."""
    ref = None
    out = []
    for p_orig, p in zip(original, prepared):
        full = {**PARAMS, **p}
        if not full["public_check"] or public_check.applies(full) is not None:
            out.append(None)
            continue
        if ref is None:
            ref = public_check.reference(lambda: ((X, np.ones(len(X)) if valid is None else valid)
                                                  for X, _, valid in public.source.fit_blocks(65536)))
        eps, delta = float(full["epsilon"]), float(full["delta"])
        sigma = public_check.check_sigma(eps, delta, accounting.relation_name(full["neighbouring"]))
        if full["secure_mode"]:
            from . import secure_noise
            secure_noise.check_plan(sigma, float(n))
        rest = public_check.rest_epsilon(eps, delta)
        out.append(Check(ref, sigma, {**p, "epsilon": rest}, {**p_orig, "epsilon": rest, "public_rank": 0}))
    return out
