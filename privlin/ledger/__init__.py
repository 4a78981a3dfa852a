"""A privacy ledger: what the items (images, by content) in private data have already paid, and the cap they may
not pass.

Every mechanism run on private rows (a fit, a sweep, a private selection, a non-private release such as a k-NN
accuracy, DP-MAE's training) is recorded as a dp-accounting event before it reads a row, on the set of items it
reads, in one ledger home outside the stores (:mod:`privlin.ledger.home`: SQLite in the user's data directory by
default, ``$PRIVLIN_LEDGER_HOME`` for another place or ``s3://`` for a team).  An item's spend is the composition of
the entries that read it; a split's total and a cap check are its worst item's (:mod:`privlin.ledger.items`:
:func:`privlin.accounting.compose_epsilon`, exact GDP when every entry is a full-batch Gaussian, else PLD).

The ledger is policy, not a per-call argument: caps are stored on item sets, and every charge is checked against
the stored caps of its items, whoever charges.  A cap passed by a caller may set or lower it; raising it is an
explicit, recorded act (:meth:`PrivacyLedger.set_cap`).

Routes: ``PrivacyLedger.for_split(store, split)`` (a store split's items; a ``privacy_ledger.json`` the store kept
before is imported once, :mod:`privlin.ledger.migrate`), ``PrivacyLedger.for_items(ids)`` (arrays with item ids);
arrays without ids get an in-memory ledger (:class:`PrivacyLedger` ``in_memory``) or a ledger file
(``PrivacyLedger(path)``), which compose with nothing else.  Both kinds are a :class:`Ledger` (what they share:
composing and checking against a cap, :mod:`privlin.ledger.budget`); ``for_split``/``for_items`` give an
:class:`ItemLedger`.  Command line: ``python -m privlin.ledger PATH``.

Tamper-evident: every record of the home is hash-chained, every item set checked against its hash; a damaged home
is one line (:class:`LedgerDamaged`), never a lower total.  What it does not protect against (a re-encoded image is a
new item; two homes): PRIVACY.md.
"""
from __future__ import annotations

import importlib

__all__ = ["LEDGER_FILENAME", "PrivacyBudgetExceeded", "LedgerDamaged", "LedgerEntry", "Ledger", "PrivacyLedger",
           "ItemLedger", "ledger_path"]

#: Where each public name lives, bottom up: ``entry`` (a record), ``home`` (the item store), ``budget`` (composing
#: against a cap), ``document`` (a ledger file's format), ``items`` (a set of items in the home), ``migrate`` (a
#: store's old ledger file into the home), ``core`` (:class:`PrivacyLedger` and its constructors).
_HOME = {"LedgerEntry": "entry", "LedgerDamaged": "home", "PrivacyBudgetExceeded": "budget", "Ledger": "budget",
         "LEDGER_FILENAME": "document", "ledger_path": "document", "ItemLedger": "items", "PrivacyLedger": "core"}


def __getattr__(name: str):
    """The public names, imported on first use (dp-accounting takes seconds to import, and
    ``python -m privlin.ledger --help`` must not wait for it)."""
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
