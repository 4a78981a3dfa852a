"""What an exact number computed from a split's rows costs that split: an accuracy, a k-NN vote, a sweep's scores.

Such a number (no noise) is a non-private release about every row it reads.  The split whose rows enter it pays,
before a row is read, as the training split pays for a fit: a ``NonPrivateDpEvent`` on its ledger (a store split's
own ledger; arrays only on one passed in), so any cap refuses it and its total reads ∞.  Or the caller declares the
rows public (``public=True``: a test set published with the dataset, a held-out set you may look at): then nothing
is charged, the split's ledger records the declaration as a ``NoOpDpEvent`` entry that says so, and the result
says so too.  :func:`privlin.evaluate`, :func:`privlin.knn.knn_accuracy` and :func:`privlin.sweep.sweep` (its
evaluation split) charge through here.
"""
from __future__ import annotations

from dp_accounting import dp_event as _ev

from . import data

__all__ = ["check_exact", "charge_exact"]

#: What a ledger entry and a result say of rows declared public.
DECLARED_PUBLIC = "declared public by the caller (public=True): its exact numbers are not charged"


def check_exact(source: data.Source, *, public: bool, mechanism: str, budget=None, ledger=None) -> None:
    """Raise :class:`privlin.ledger.PrivacyBudgetExceeded` now (nothing recorded, nothing read) where
    :func:`charge_exact` would be refused: for a caller that charges another split first."""
    led = source.ledger(cap=budget, ledger=ledger)
    if led is not None and not public:
        led.check(_ev.NonPrivateDpEvent(), mechanism=mechanism)


def charge_exact(source: data.Source, *, public: bool, mechanism: str, params=None, budget=None,
                 ledger=None) -> str:
    """Charge ``source``'s ledger for an exact release about its rows, before any is read; returns what the
    result should say of it.

    Parameters
    ----------
    source : privlin.data.Source
        The rows the number is computed from.
    public : bool
        The caller declares these rows public: a ``NoOpDpEvent`` entry records the declaration (where there is a
        ledger), nothing is charged.
    mechanism : str
        The ledger entry's name, e.g. ``"privlin.evaluate/accuracy"``.
    params : mapping, optional
        Public facts kept with the entry (never a key).
    budget, ledger
        As for :class:`privlin.DPLinearClassifier` (a store split always charges its own ledger).

    Raises
    ------
    privlin.ledger.PrivacyBudgetExceeded
        The ledger has a cap (a non-private release passes none): nothing was read.
    """
    led = source.ledger(cap=budget, ledger=ledger)
    params = {"n": source.n, **dict(params or {})}
    if public:
        if led is not None:
            led.charge(_ev.NoOpDpEvent(), mechanism=f"{mechanism} (declared public)", epsilon=0.0, delta=0.0,
                       params={**params, "note": DECLARED_PUBLIC})
        return DECLARED_PUBLIC
    if led is None:
        return "not charged: arrays carry no ledger (pass ledger=, or declare them public)"
    led.charge(_ev.NonPrivateDpEvent(), mechanism=mechanism, epsilon=float("inf"), delta=0.0,
               params={**params, "note": "exact, no noise: a non-private release about these rows"})
    return f"charged to {led.where} as a non-private release (ε = ∞)"
