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
(``PrivacyLedger(path)``), which compose with nothing else.  Command line: ``python -m privlin.ledger PATH``.

Tamper-evident: every record of the home is hash-chained, every item set checked against its hash; a damaged home
is one line (:class:`LedgerDamaged`), never a lower total.  What it does not protect against (a re-encoded image is a
new item; two homes): PRIVACY.md.
"""
from __future__ import annotations

import importlib

__all__ = ["LEDGER_FILENAME", "PrivacyBudgetExceeded", "LedgerDamaged", "LedgerEntry", "PrivacyLedger",
           "ledger_path"]

LEDGER_FILENAME = "privacy_ledger.json"
_SUBMODULES = {"core", "entry", "home", "items", "migrate", "storage"}


def __getattr__(name: str):
    """Everything else from :mod:`privlin.ledger.core`, imported on first use (dp-accounting takes seconds to
    import, and ``python -m privlin.ledger --help`` must not wait for it)."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _SUBMODULES:  # ``from . import storage`` inside core, while core is still loading
        return importlib.import_module(f".{name}", __name__)
    core = importlib.import_module(".core", __name__)
    importlib.import_module(".migrate", __name__)  # registers the home's openers in core (they subclass its ledger)
    try:
        return getattr(core, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
