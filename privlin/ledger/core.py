"""The ledger itself (:mod:`privlin.ledger` names it; see there): document, hash chain, anchor, charges."""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
from typing import Iterable, Mapping, Sequence

from dp_accounting import dp_event as _ev

from .. import accounting
from ..report import relation_label
from . import LEDGER_FILENAME, storage
from .entry import LedgerEntry, jsonable
from .home import LedgerDamaged

__all__ = ["LEDGER_FILENAME", "PrivacyBudgetExceeded", "LedgerDamaged", "LedgerEntry", "PrivacyLedger",
           "ledger_path"]

FORMAT = "privlin.ledger/2"


class PrivacyBudgetExceeded(RuntimeError):
    """A mechanism would push a split's total ε past its cap; nothing was read."""




def _head(previous: str, neighbouring, caps, entries) -> str:
    """sha256 of a ledger state (relation, caps, entries), chained to the state before."""
    body = json.dumps({"previous": previous, "neighbouring": neighbouring, "caps": caps,
                       "entries": [e.to_dict() for e in entries]}, sort_keys=True, separators=(",", ":"),
                      allow_nan=False)
    return hashlib.sha256(body.encode()).hexdigest()


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


#: How ledgers in the home are opened: ``privlin.ledger.items`` and ``.migrate`` register here on import (their
#: ledgers subclass :class:`PrivacyLedger`, so this module cannot import them); ``privlin.ledger`` loads them.
OPENERS: dict = {}


def _opener(kind: str):
    try:
        return OPENERS[kind]
    except KeyError:
        raise RuntimeError("the ledger home's openers are not loaded: import PrivacyLedger from privlin.ledger, "
                           "not privlin.ledger.core") from None


def ledger_path(store_url: str, split: str) -> str:
    """Where the ledger of ``split`` of the store at ``store_url`` lives."""
    if not isinstance(split, str) or not split or "/" in split or split in (".", ".."):
        raise ValueError(f"split must be a plain name, got {split!r}")
    return str(store_url).rstrip("/") + "/" + split + "/" + LEDGER_FILENAME


def _check_cap(cap) -> tuple[float, float] | None:
    if cap is None:
        return None
    try:
        eps, delta = (float(c) for c in cap)
    except (TypeError, ValueError):
        raise ValueError(f"cap must be (epsilon, delta), got {cap!r}") from None
    if not (eps >= 0 and 0 < delta < 1):
        raise ValueError(f"cap must have epsilon >= 0 and 0 < delta < 1, got {cap!r}")
    return (eps, delta)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class _Document:
    """The parsed ledger document: relation, cap history, entries."""

    def __init__(self, data: dict | None, where: str):
        self.where = where
        if data is None:
            self.neighbouring, self.caps, self.entries, self.head, self.previous = None, [], [], "", ""
            return
        if not isinstance(data, Mapping) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
            raise LedgerDamaged(f"{where} is not a privlin ledger (format {FORMAT}): damaged or replaced")
        try:
            self.neighbouring = accounting.relation_name(data.get("neighbouring"))
            self.caps = list(data.get("caps") or [])
            self.entries = [LedgerEntry.from_dict(d) for d in data["entries"]]
        except (ValueError, TypeError) as e:
            if "unknown DpEvent type" in str(e):
                raise
            raise LedgerDamaged(f"privacy ledger {where} is damaged: {e}") from None
        self.previous, self.head = str(data.get("previous", "")), str(data.get("head", ""))
        if self.head != _head(self.previous, self.neighbouring, self.caps, self.entries):
            raise LedgerDamaged(f"privacy ledger {where} does not match its checksum: edited or damaged "
                                f"({len(self.entries)} entries)")

    @property
    def cap(self) -> tuple[float, float] | None:
        return _check_cap((self.caps[-1]["epsilon"], self.caps[-1]["delta"])) if self.caps else None

    def to_dict(self) -> dict:
        """The document of this state, chained to the one it was read as."""
        head = _head(self.head, self.neighbouring, self.caps, self.entries)
        return {"format": FORMAT, "neighbouring": self.neighbouring, "caps": self.caps,
                "entries": [e.to_dict() for e in self.entries], "previous": self.head, "head": head}


class StoreAnchor:
    """A split ledger's anchor in the split's sealed metadata (``stores.anchor``): what :func:`_anchor_record` gives."""

    def __init__(self, url: str, split: str):
        self.url, self.split = url, split

    def get(self):
        from stores.anchor import ledger_anchor

        return ledger_anchor(self.url, self.split)

    def set(self, record: dict) -> None:
        from stores.anchor import set_ledger_anchor

        set_ledger_anchor(self.url, self.split, record)


def _anchor_record(data: dict) -> dict:
    """What an anchor commits to: the state's head, the state it was chained to, and its entry and cap counts, so
    the anchored state can be recomputed from any ledger that extends it (:func:`_extends`)."""
    return {"entries": len(data["entries"]), "caps": len(data["caps"]), "head": data["head"],
            "previous": data["previous"]}


def _extends(doc: _Document, anchored: Mapping) -> bool:
    """Whether ``doc`` is one write past the anchored state: chained to it, and holding its caps and entries
    unchanged as a prefix (a crash between the ledger's write and the anchor's move leaves exactly that)."""
    n, c = int(anchored.get("entries", -1)), anchored.get("caps")
    if doc.previous != anchored.get("head") or not 0 <= n <= len(doc.entries):
        return False
    if c is None or "previous" not in anchored:  # an anchor written before it committed to its prefix
        return n < len(doc.entries)
    return int(c) <= len(doc.caps) and _head(anchored["previous"], doc.neighbouring, doc.caps[:int(c)],
                                             doc.entries[:n]) == anchored["head"]


class PrivacyLedger:
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
        self._requested_cap = _check_cap(cap)
        self._requested_relation = None if neighbouring is None else accounting.relation_name(neighbouring)
        self._backend = storage.backend(self.path, lock_timeout)
        self._anchor = anchor  # get() -> record | None, set(record) (_anchor_record), e.g. a store split's

    # -- construction -----------------------------------------------------------------
    @classmethod
    def in_memory(cls, *, cap=None, neighbouring=None) -> "PrivacyLedger":
        """A ledger for in-memory arrays; :meth:`save` it to keep it."""
        return cls(None, cap=cap, neighbouring=neighbouring)

    @classmethod
    def for_split(cls, store_url: str | os.PathLike, split: str, *, anchored: bool | None = None,
                  home=None, **kwargs) -> "PrivacyLedger":
        """The ledger of the items of split ``split`` of the store at ``store_url``, in the ledger home
        (:class:`privlin.ledger.items.ItemLedger`): every store, copy and backbone of the same images shares it.
        A ledger file the store kept before (``<split>/privacy_ledger.json``) is imported first, once.
        ``anchored`` is accepted for older callers and ignored (the home is outside the store)."""
        return _opener("split")(store_url, split, home=home, **kwargs)

    @classmethod
    def for_items(cls, items, *, label: str | None = None, home=None, **kwargs) -> "PrivacyLedger":
        """The ledger of ``items`` (``stores.items`` ids, one per row a mechanism reads) in the ledger home: what
        arrays with item ids charge (``Split.items`` gives a store's)."""
        return _opener("items")(items, label=label, home=home, **kwargs)

    @classmethod
    def load(cls, path, **kwargs) -> "PrivacyLedger":
        """Open an existing ledger file (error if it does not exist)."""
        led = cls(path, **kwargs)
        if led._backend.read() is None:
            raise FileNotFoundError(f"no privacy ledger at {path}")
        return led

    def request_cap(self, cap) -> "PrivacyLedger":
        """Ask for ``cap`` at the next charge (it may set or lower the stored cap, never raise it); returns self."""
        if cap is not None:
            self._requested_cap = _check_cap(cap)
        return self

    # -- reading ----------------------------------------------------------------------
    def _doc(self) -> _Document:
        doc = _Document(self._backend.read(), self.path or "in-memory ledger")
        if self._anchor is not None:
            recorded = self._anchor.get()
            if recorded and recorded["head"] != doc.head and not _extends(doc, recorded):
                raise LedgerDamaged(
                    f"privacy ledger {self.where} is {'missing' if not doc.head else 'not the one'} the store "
                    f"records ({recorded['entries']} entries, head {recorded['head'][:12]}): deleted, replaced or "
                    f"edited; the split's budget cannot be read (restore the file from a backup)")
        return doc

    def _write(self, doc: _Document) -> None:
        data = doc.to_dict()
        self._backend.write(data)
        if self._anchor is not None:
            self._anchor.set(_anchor_record(data))

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

    def __len__(self) -> int:
        return len(self.entries)

    def events(self) -> list[_ev.DpEvent]:
        return [e.event for e in self.entries]

    def default_delta(self, entries: Sequence[LedgerEntry] | None = None, cap=None) -> float:
        """The δ every total is reported at: the cap's δ, else the smallest positive δ of the entries (0 when none).

        Never their sum: a total at a larger δ than one of its own entries would read smaller than that entry's ε.
        """
        cap = self.cap if cap is None else cap
        if cap is not None:
            return cap[1]
        entries = self.entries if entries is None else entries
        return min((e.delta for e in entries if e.delta > 0), default=0.0)

    def spent(self, delta: float | None = None) -> tuple[float, float]:
        """Total ``(epsilon, delta)`` paid so far, by :func:`privlin.accounting.compose_epsilon` (at
        :meth:`default_delta` unless given)."""
        doc = self._doc()
        delta = self.default_delta(doc.entries, doc.cap or self._requested_cap) if delta is None else float(delta)
        return self._compose(doc.entries, delta, self._relation_of(doc)), delta

    def _relation_of(self, doc: _Document) -> str:
        return doc.neighbouring or self._requested_relation or accounting.DEFAULT_NEIGHBOURING

    @staticmethod
    def _compose(entries: Sequence[LedgerEntry], delta: float, relation: str) -> float:
        for e in entries:
            if e.neighbouring != relation:
                raise ValueError(f"ledger entry {e.id} ({e.mechanism}) is under {relation_label(e.neighbouring)} "
                                 f"neighbours, the ledger under {relation_label(relation)}: they do not compose")
        if not entries:
            return 0.0
        if delta <= 0 and not all(isinstance(e.event, (_ev.NoOpDpEvent, _ev.NonPrivateDpEvent)) for e in entries):
            raise ValueError("a total over Gaussian mechanisms needs delta > 0")  # (0 or ∞ need no δ)
        return accounting.compose_epsilon((e.event for e in entries), delta, neighbouring=relation)

    def projected(self, event: _ev.DpEvent, delta: float | None = None) -> tuple[float, float]:
        """Total ``(epsilon, delta)`` if ``event`` were run now (what :meth:`check` compares with the cap)."""
        doc = self._doc()
        delta = self.default_delta(doc.entries, doc.cap or self._requested_cap) if delta is None else float(delta)
        return self._with(doc.entries, event, "probe", delta, self._relation_of(doc)), delta

    def _with(self, entries, event, mechanism, delta, relation) -> float:
        """ε at ``delta`` of ``entries`` and ``event`` composed."""
        return self._compose([*entries, LedgerEntry(mechanism, event, math.nan, 0.0, relation)], delta, relation)

    def check(self, event: _ev.DpEvent, *, mechanism: str = "mechanism") -> float:
        """Raise :class:`PrivacyBudgetExceeded` if ``event`` would pass the cap (nothing is recorded).

        Returns the projected total ε at the cap's δ; without a cap, ``nan``.
        """
        doc = self._doc()
        cap = self._cap_after(doc.cap)
        if cap is None:
            return math.nan
        return self._check(doc.entries, event, mechanism, cap, self._relation_of(doc))

    def _check(self, entries, event, mechanism, cap, relation) -> float:
        eps_cap, delta_cap = cap
        total = self._with(entries, event, mechanism, delta_cap, relation)
        if total > eps_cap * (1 + 1e-9):
            spent = self._compose(entries, delta_cap, relation)
            raise PrivacyBudgetExceeded(
                f"{mechanism} would bring the total to ε={total:.4g} at δ={delta_cap:g}, past the cap "
                f"ε={eps_cap:g} ({len(entries)} earlier entries already spent ε={spent:.4g} at δ={delta_cap:g}; "
                f"ledger: {self.where}). Nothing was read.")
        return total

    def _cap_after(self, stored) -> tuple[float, float] | None:
        """The cap once this handle's requested cap is applied: it may set or lower the ``stored`` one, never raise
        it."""
        asked = self._requested_cap
        if asked is None or asked == stored:
            return stored
        if stored is not None and (asked[0] > stored[0] or asked[1] > stored[1]):
            raise PrivacyBudgetExceeded(
                f"budget (ε={asked[0]:g}, δ={asked[1]:g}) is above the cap stored in {self.where} "
                f"(ε={stored[0]:g}, δ={stored[1]:g}); raising a cap is an explicit act: "
                f"PrivacyLedger({self.where!r}).set_cap(...). Nothing was read.")
        return asked

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
                        doc.caps.append({"epsilon": cap[0], "delta": cap[1], "time": _now(), "note": "set by a charge"})
                        doc.neighbouring = rel
                        self._write(doc)
                    raise
            if cap != doc.cap:
                doc.caps.append({"epsilon": cap[0], "delta": cap[1], "time": _now(), "note": "set by a charge"})
            doc.neighbouring = rel
            doc.entries.append(entry)
            self._write(doc)
        return entry

    def set_cap(self, epsilon: float, delta: float, *, note: str = "") -> None:
        """Set the cap to ``(epsilon, delta)``, higher or lower than before: recorded with its time and ``note``.

        Raising a stored cap (either number) needs a ``note`` saying why (``ValueError`` without one): it is the
        one act that lets a split spend more.
        """
        cap = _check_cap((epsilon, delta))
        with self._backend.locked():
            doc = self._doc()
            stored = doc.cap
            if stored is not None and (cap[0] > stored[0] or cap[1] > stored[1]) and not str(note).strip():
                raise ValueError(f"raising the cap of {self.where} from (ε={stored[0]:g}, δ={stored[1]:g}) to "
                                 f"(ε={cap[0]:g}, δ={cap[1]:g}) needs a note saying why (it is recorded)")
            doc.neighbouring = self._relation_of(doc)
            doc.caps.append({"epsilon": cap[0], "delta": cap[1], "time": _now(), "note": str(note)})
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
        lines = [f"privacy ledger: {self.where}  [{relation_label(rel)} neighbours]"]
        if not doc.entries:
            lines.append("  (no mechanisms recorded)")
        for i, e in enumerate(doc.entries):
            lines.append(f"  {i + 1:3d}  {e.time}  {e.mechanism:<34s} ε={e.epsilon:<8.4g} δ={e.delta:.2g}")
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

    def __deepcopy__(self, memo):
        # A ledger is a handle on shared state (a file, or one in-memory history):
        # sklearn.clone must not fork it, or charges would land in a copy.
        return self
