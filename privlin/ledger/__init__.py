"""A privacy ledger: what a private split has already paid, and the cap it may not pass.

Every mechanism run on a private split (a fit, a sweep, a private selection, a non-private release such as
a k-NN accuracy) is recorded as a dp-accounting event before it reads a row; the ledger composes them into the
total spent (:func:`privlin.accounting.compose_epsilon`: exact GDP when every entry is a full-batch Gaussian, else
PLD).

The ledger is policy, not a per-call argument: its document stores the neighbouring relation and the cap,
and every charge is checked against the stored cap, whoever charges.  A cap passed by a caller may set or
lower it; raising it is an explicit, recorded act (:meth:`PrivacyLedger.set_cap`).

Where it lives: ``<store>/<split>/privacy_ledger.json`` beside a store split (:func:`ledger_path`); arrays get
an in-memory ledger unless one is given.  Storage: :mod:`privlin.ledger.storage`; command line:
``python -m privlin.ledger PATH``.

Tamper-evident: every state of the document carries the sha256 of its entries, caps and relation, chained to
the state before (:func:`_head`); a store split's ledger is anchored in the split's sealed metadata
(``stores.anchor``), so a deleted, emptied, truncated or edited ledger fails closed
(:class:`LedgerDamaged`) instead of resetting the split's budget.

What it protects against: mistakes (a forgotten earlier fit, a second notebook, a rerun, a cleanup that
deleted a file).  Not against someone who rewrites the store's metadata and the ledger together.
"""
from __future__ import annotations

import importlib

__all__ = ["LEDGER_FILENAME", "PrivacyBudgetExceeded", "LedgerDamaged", "LedgerEntry", "PrivacyLedger",
           "ledger_path"]

LEDGER_FILENAME = "privacy_ledger.json"


def __getattr__(name: str):
    """Everything else from :mod:`privlin.ledger.core`, imported on first use (dp-accounting takes seconds to
    import, and ``python -m privlin.ledger --help`` must not wait for it)."""
    if name.startswith("__"):
        raise AttributeError(name)
    core = importlib.import_module(".core", __name__)
    try:
        return getattr(core, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
