"""The ledger users open (:mod:`privlin.ledger` names it; see there): a ledger file or an in-memory history, and
the constructors of the ledgers in the home (:meth:`PrivacyLedger.for_split`, :meth:`PrivacyLedger.for_items`)."""
from __future__ import annotations

import math
import os
from typing import Iterable, Mapping

from dp_accounting import dp_event as _ev

from .. import accounting
from ..accounting import relation_label
from . import storage
from .budget import Ledger, PrivacyBudgetExceeded, check_cap, now
from .document import LEDGER_FILENAME, Document, StoreAnchor, anchor_record, ledger_path, read
from .entry import LedgerEntry, jsonable
from .home import LedgerDamaged
from .items import ItemLedger
from .migrate import split_ledger

__all__ = ["LEDGER_FILENAME", "PrivacyBudgetExceeded", "LedgerDamaged", "LedgerEntry", "PrivacyLedger",
           "StoreAnchor", "ledger_path"]


def _reopen(path, cap, neighbouring, anchor):
    """The same ledger file (and anchor) in another process."""
    return PrivacyLedger(path, cap=cap, neighbouring=neighbouring, anchor=anchor)


class _Elsewhere:
    """What an in-memory ledger becomes in another process: its history stays in the first one, so a charge here
    would be lost; every use refuses with one line (before a fit reads a row), which a worker pool such as
    joblib's reports as the fit's own error rather than as a pickling failure."""

    def __init__(self, message: str):
        self.__dict__["_message"] = message

    def __getattr__(self, name):
        raise ValueError(self.__dict__["_message"])

    def __reduce__(self):
        return _Elsewhere, (self.__dict__["_message"],)

    def __repr__(self):
        return "<in-memory PrivacyLedger of another process>"


class PrivacyLedger(Ledger):
    """The privacy spent on one private split (composed exactly by GDP when every entry is a full-batch Gaussian,
    else by PLD: :func:`privlin.accounting.compose_epsilon`), and its cap.

    Parameters
    ----------
    path : str or None
        Ledger JSON file (local path or fsspec URL).  ``None`` keeps it in memory (for arrays).
    cap : (float, float) or None
        Budget ``(epsilon, delta)`` to set, or to lower, at the next charge.  A ledger whose stored cap is
        lower refuses a higher one (raise it with :meth:`set_cap`).  Once stored it binds every charge.
    neighbouring : str or None
        dp-accounting's relation of every entry; None: the stored one, else ``"replace_special"``.  Entries
        under another relation are refused (their ε do not compose).
    lock_timeout : float
        Seconds to wait for another writer of a local ledger file.

    Notes
    -----
    Charge first, then read data: :meth:`charge` checks the cap and appends the entry in one locked step, so
    two concurrent fits cannot both slip under the cap.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, cap=None, neighbouring=None,
                 lock_timeout: float = 60.0, anchor=None):
        self.path = None if path is None else storage.canonical(path)
        self._requested_cap = check_cap(cap)
        self._requested_relation = None if neighbouring is None else accounting.relation_name(neighbouring)
        self._backend = storage.backend(self.path, lock_timeout)
        self._anchor = anchor  # get() -> record | None, set(record) (anchor_record), e.g. a store split's

    # -- construction -----------------------------------------------------------------
    @classmethod
    def in_memory(cls, *, cap=None, neighbouring=None) -> "PrivacyLedger":
        """A ledger for in-memory arrays; :meth:`save` it to keep it."""
        return cls(None, cap=cap, neighbouring=neighbouring)

    @classmethod
    def for_split(cls, store_url: str | os.PathLike, split: str, *, anchored: bool | None = None,
                  home=None, **kwargs) -> ItemLedger:
        """The ledger of the items of split ``split`` of the store at ``store_url``, in the ledger home
        (:class:`privlin.ledger.items.ItemLedger`): every store, copy and backbone of the same images shares it.
        A ledger file the store kept before (``<split>/privacy_ledger.json``) is imported first, once.
        ``anchored`` is accepted for older callers and ignored (the home is outside the store)."""
        return split_ledger(store_url, split, home=home, **kwargs)

    @classmethod
    def for_items(cls, items, *, label: str | None = None, home=None, **kwargs) -> ItemLedger:
        """The ledger of ``items`` (``stores.items`` ids, one per row a mechanism reads) in the ledger home: what
        arrays with item ids charge (``Split.items`` gives a store's)."""
        return ItemLedger(items, label=label, home=home, **kwargs)

    @classmethod
    def load(cls, path, **kwargs) -> "PrivacyLedger":
        """Open an existing ledger file (error if it does not exist)."""
        led = cls(path, **kwargs)
        if led._backend.read() is None:
            raise FileNotFoundError(f"no privacy ledger at {path}")
        return led

    # -- reading ----------------------------------------------------------------------
    def _doc(self) -> Document:
        return read(self._backend.read(), self.where, self._anchor)

    def _write(self, doc: Document) -> None:
        data = doc.to_dict()
        self._backend.write(data)
        if self._anchor is not None:
            self._anchor.set(anchor_record(data))

    @property
    def where(self) -> str:
        return self.path or "in-memory ledger"

    @property
    def neighbouring(self) -> str:
        return self._doc().neighbouring or self._requested_relation or accounting.DEFAULT_NEIGHBOURING

    @property
    def cap(self) -> tuple[float, float] | None:
        """The cap in force: the stored one, else the one this handle will set at its first charge."""
        return self._doc().cap or self._requested_cap

    @property
    def entries(self) -> list[LedgerEntry]:
        """All recorded entries, oldest first (re-read from storage)."""
        return self._doc().entries

    def spent(self, delta: float | None = None) -> tuple[float, float]:
        """Total ``(epsilon, delta)`` paid so far, by :func:`privlin.accounting.compose_epsilon` (at
        :meth:`default_delta` unless given)."""
        doc = self._doc()
        delta = self.default_delta(doc.entries, doc.cap or self._requested_cap) if delta is None else float(delta)
        return self._compose(doc.entries, delta, self._relation_of(doc)), delta

    def _relation_of(self, doc: Document) -> str:
        return doc.neighbouring or self._requested_relation or accounting.DEFAULT_NEIGHBOURING

    def projected(self, event: _ev.DpEvent, delta: float | None = None) -> tuple[float, float]:
        """Total ``(epsilon, delta)`` if ``event`` were run now (what :meth:`check` compares with the cap)."""
        doc = self._doc()
        delta = self.default_delta(doc.entries, doc.cap or self._requested_cap) if delta is None else float(delta)
        return self._with(doc.entries, event, "probe", delta, self._relation_of(doc)), delta

    def check(self, event: _ev.DpEvent, *, mechanism: str = "mechanism") -> float:
        """Raise :class:`PrivacyBudgetExceeded` if ``event`` would pass the cap (nothing is recorded).

        Returns the projected total ε at the cap's δ; without a cap, ``nan``.
        """
        doc = self._doc()
        cap = self._cap_after(doc.cap)
        if cap is None:
            return math.nan
        return self._check(doc.entries, event, mechanism, cap, self._relation_of(doc))

    # -- writing ----------------------------------------------------------------------
    def charge(self, event: _ev.DpEvent, *, mechanism: str, epsilon: float, delta: float,
               params: Mapping | None = None, neighbouring=None, entry_id: str | None = None) -> LedgerEntry:
        """Check the stored cap and record ``event`` in one locked step.  Call it *before* reading private rows.

        Parameters
        ----------
        event : dp_accounting.DpEvent
            The mechanism exactly as it will run.
        mechanism : str
            Human-readable name, e.g. ``"DPLinearClassifier/sgd"``.
        epsilon, delta : float
            The mechanism's own guarantee (for the history).
        params : mapping, optional
            JSON metadata kept with the entry (never a key or seed).
        neighbouring : str, optional
            The relation the mechanism's guarantee is under; refused unless it is the ledger's.
        entry_id : str, optional
            A stable id for a mechanism that must be recorded once only (charging it again records nothing).

        Raises
        ------
        PrivacyBudgetExceeded
            The total would pass the cap (nothing is recorded).
        """
        asked = None if neighbouring is None else accounting.relation_name(neighbouring)
        with self._backend.locked():
            doc = self._doc()
            rel = self._relation_of(doc) if doc.neighbouring or asked is None else asked
            for other in (self._requested_relation, asked):
                if other is not None and other != rel:
                    raise ValueError(f"{self.where} is a ledger under {relation_label(rel)} neighbours; this "
                                     f"mechanism is under {relation_label(other)}: they do not compose")
            entry = LedgerEntry(mechanism=str(mechanism), event=event, epsilon=float(epsilon), delta=float(delta),
                                neighbouring=rel, params=jsonable(dict(params or {})),
                                **({"id": entry_id} if entry_id else {}))
            if entry_id and any(e.id == entry_id for e in doc.entries):
                return next(e for e in doc.entries if e.id == entry_id)
            entry.to_dict()  # validate before writing
            cap = self._cap_after(doc.cap)
            if cap is not None:
                try:
                    self._check(doc.entries, event, entry.mechanism, cap, rel)
                except PrivacyBudgetExceeded:
                    if cap != doc.cap:  # the budget asked for is policy from now on, even for a refused charge
                        doc.caps.append({"epsilon": cap[0], "delta": cap[1], "time": now(), "note": "set by a charge"})
                        doc.neighbouring = rel
                        self._write(doc)
                    raise
            if cap != doc.cap:
                doc.caps.append({"epsilon": cap[0], "delta": cap[1], "time": now(), "note": "set by a charge"})
            doc.neighbouring = rel
            doc.entries.append(entry)
            self._write(doc)
        return entry

    def set_cap(self, epsilon: float, delta: float, *, note: str = "") -> None:
        """Set the cap to ``(epsilon, delta)``, higher or lower than before: recorded with its time and ``note``.

        Raising a stored cap (either number) needs a ``note`` saying why (``ValueError`` without one): it is the
        one act that lets a split spend more.
        """
        cap = check_cap((epsilon, delta))
        with self._backend.locked():
            doc = self._doc()
            stored = doc.cap
            if stored is not None and (cap[0] > stored[0] or cap[1] > stored[1]) and not str(note).strip():
                raise ValueError(f"raising the cap of {self.where} from (ε={stored[0]:g}, δ={stored[1]:g}) to "
                                 f"(ε={cap[0]:g}, δ={cap[1]:g}) needs a note saying why (it is recorded)")
            doc.neighbouring = self._relation_of(doc)
            doc.caps.append({"epsilon": cap[0], "delta": cap[1], "time": now(), "note": str(note)})
            self._write(doc)
        self._requested_cap = None

    def extend(self, entries: Iterable[LedgerEntry]) -> None:
        """Append existing entries (e.g. merge an in-memory ledger); checked against the stored cap."""
        entries = list(entries)
        with self._backend.locked():
            doc = self._doc()
            rel = self._relation_of(doc)
            seen = {e.id for e in doc.entries}
            new = [e for e in entries if e.id not in seen]
            cap = self._cap_after(doc.cap)
            if cap is not None and new:
                self._check(doc.entries, _ev.ComposedDpEvent([e.event for e in new]), "merged entries", cap, rel)
            doc.neighbouring = rel
            doc.entries += new
            self._write(doc)

    def save(self, path: str | os.PathLike) -> "PrivacyLedger":
        """Append this ledger's entries to the ledger file at ``path``; returns that ledger."""
        other = PrivacyLedger(path, cap=self.cap, neighbouring=self.neighbouring)
        other.extend(self.entries)
        return other

    def to_dict(self) -> dict:
        doc = self._doc()
        doc.neighbouring = self._relation_of(doc)
        return doc.to_dict()

    # -- display ----------------------------------------------------------------------
    def summary(self, delta: float | None = None) -> str:
        """The history, one line per entry, then the total (and how it was composed) with its δ."""
        doc = self._doc()
        rel = self._relation_of(doc)
        lines = self._summary_head(rel, doc.entries)
        cap = doc.cap or self._requested_cap
        delta = self.default_delta(doc.entries, cap) if delta is None else delta
        if doc.entries:
            total = self._compose(doc.entries, delta, rel)
            how = accounting.composition_name(e.event for e in doc.entries)
            lines.append(f"total ({how} composition of {len(doc.entries)} entries): ε={total:.4g} at δ={delta:.3g}")
        for c in doc.caps:
            lines.append(f"cap set {c.get('time', '')}: ε={c['epsilon']:g} at δ={c['delta']:g}"
                         + (f"  ({c['note']})" if c.get("note") else ""))
        lines.append(f"cap: ε={cap[0]:g} at δ={cap[1]:g}" if cap is not None else "cap: none")
        return "\n".join(lines)

    def __repr__(self) -> str:
        if self.path is None:
            return f"PrivacyLedger.in_memory(cap={self.cap}) at {id(self):#x} with {len(self)} entries"
        return f"PrivacyLedger({self.path!r}, cap={self.cap})"

    def __reduce__(self):
        if self.path is None:  # a copy in another process would charge a history no one reads back
            return _Elsewhere, (f"{self!r} is an in-memory ledger and cannot be used in another process (e.g. "
                                "GridSearchCV(n_jobs > 1)): use a ledger file, PrivacyLedger(path), or n_jobs=1",)
        return (_reopen, (self.path, self._requested_cap, self._requested_relation, self._anchor))
