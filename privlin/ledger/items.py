"""A ledger over a set of items in the ledger home (:mod:`privlin.ledger.home`): what a store split, arrays with
item ids, or a DP-MAE run charges.

Every charge records the set of items its mechanism reads. What an item has spent is the composition of every
entry whose set holds it; what these items report, and what a cap checks, is their worst item. Exact: the items
are grouped by which recorded sets hold them (items in the same sets have spent the same), and each group's entries
are composed (:func:`privlin.accounting.compose_epsilon`), so two fits on disjoint halves spend one fit's ε each.
A cap is recorded on a set of items too; an item's cap is the latest one recorded on a set holding it.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np
from dp_accounting import dp_event as _ev

from .. import accounting
from ..events import for_rows
from ..accounting import relation_label
from . import home as _home
from .budget import Ledger, PrivacyBudgetExceeded, check_cap, now
from .entry import LedgerEntry, jsonable

__all__ = ["ItemLedger", "Group"]


@dataclass
class Group:
    """Items that every recorded set either holds all of or none of: they have spent the same."""

    items: int
    entries: list
    cap: tuple | None
    relation: str | None


def _reopen(where, values, label, cap, relation, rows_per_item=1):
    return ItemLedger(_home.ItemSet(values, _home.ItemSet.key_of(values), rows_per_item), home=where, label=label,
                      cap=cap, neighbouring=relation)


class ItemLedger(Ledger):
    """The privacy spent on a set of items, read from and charged to the ledger home.

    Parameters
    ----------
    items : array of str or ItemSet
        The items the mechanisms read (``stores.items``: 32 hex characters each).
    home : str, optional
        The ledger home (default: :func:`privlin.ledger.home.location`).
    label : str, optional
        What the items are, for messages (``store s.zarr, split 'train'``).
    cap, neighbouring, lock_timeout
        As :class:`privlin.ledger.PrivacyLedger`; a cap set here is recorded on these items.
    """

    def __init__(self, items, *, home=None, label: str | None = None, cap=None, neighbouring=None,
                 lock_timeout: float = 60.0):
        self.scope = items if isinstance(items, _home.ItemSet) else _home.ItemSet.of(items)
        self.home = _home.open_home(home, timeout=lock_timeout)
        self.path = self.home.where
        self.label = label or f"{len(self.scope)} items"
        self._requested_cap = check_cap(cap)
        self._requested_relation = None if neighbouring is None else accounting.relation_name(neighbouring)
        self._members: dict[str, np.ndarray | bool] = {}

    # -- the items' state ---------------------------------------------------------------
    def _member(self, key: str):
        """Which of the scope's items the recorded set ``key`` holds: True (all), False (none) or a mask."""
        if key not in self._members:
            if key == self.scope.key:
                self._members[key] = True
            else:
                mask = self.scope.members(self.home.get_set(key))
                self._members[key] = bool(mask[0]) if mask.all() or not mask.any() else mask
        return self._members[key]

    def _groups(self, records: list[dict]) -> list[Group]:
        """The scope's items grouped by the recorded sets that hold them (exact; one group in the usual case)."""
        keys = list(dict.fromkeys(r["set"] for r in records))
        held = {k: self._member(k) for k in keys}
        partial = [k for k in keys if not isinstance(held[k], bool)]
        if not partial:
            signatures = [({k for k in keys if held[k] is True}, len(self.scope))]
        else:
            bits = np.packbits(np.stack([held[k] for k in partial], axis=1), axis=1)
            rows = np.ascontiguousarray(bits).view(f"V{bits.shape[1]}").ravel()
            uniq, first, counts = np.unique(rows, return_index=True, return_counts=True)
            whole = {k for k in keys if held[k] is True}
            signatures = [(whole | {k for j, k in enumerate(partial) if held[k][i]}, int(c))
                          for i, c in zip(first, counts)]
        return [self._group(records, sig, n) for sig, n in signatures]

    def _group(self, records, sig: set, n: int) -> Group:
        entries, cap = [], None
        try:
            for r in records:
                if r["set"] in sig:
                    if r["kind"] == "entry":
                        entries.append(LedgerEntry.from_dict(r["body"]))
                    elif r["kind"] == "cap":
                        cap = (float(r["body"]["epsilon"]), float(r["body"]["delta"]))
        except (KeyError, TypeError, ValueError) as e:
            if "unknown DpEvent type" in str(e):
                raise
            raise _home.LedgerDamaged(f"ledger home {self.home.where}: a record is malformed ({e})") from None
        relation = entries[0].neighbouring if entries else None
        return Group(n, entries, cap, relation)

    def _relation(self, groups) -> str:
        found = {g.relation for g in groups if g.relation}
        if len(found) > 1:
            raise ValueError(f"the items of {self.label} were charged under different neighbouring relations "
                             f"({sorted(found)}): they do not compose")
        return next(iter(found), None) or self._requested_relation or accounting.DEFAULT_NEIGHBOURING

    def _state(self):
        records = self.home.records()
        return records, self._groups(records)

    # -- reading -------------------------------------------------------------------------
    @property
    def where(self) -> str:
        return f"ledger home {self.home.where} ({self.label})"

    @property
    def neighbouring(self) -> str:
        return self._relation(self._state()[1])

    @property
    def cap(self):
        """The tightest cap stored on these items, else the one this handle sets at its first charge."""
        caps = [g.cap for g in self._state()[1] if g.cap is not None]
        return min(caps) if caps else self._requested_cap

    @property
    def entries(self) -> list[LedgerEntry]:
        """Every entry that read any of these items, oldest first."""
        records = self.home.records()
        return [LedgerEntry.from_dict(r["body"]) for r in records
                if r["kind"] == "entry" and self._member(r["set"]) is not False]

    def groups(self) -> list[Group]:
        """The items grouped by what they have spent (see the module)."""
        return self._state()[1]

    def spent(self, delta: float | None = None) -> tuple[float, float]:
        """``(epsilon, delta)`` of the worst item: the largest composition over the groups."""
        groups = self._state()[1]
        delta = self._delta(groups) if delta is None else float(delta)
        rel = self._relation(groups)
        return max((self._compose(g.entries, delta, rel) for g in _distinct(groups)), default=0.0), delta

    def _delta(self, groups) -> float:
        caps = [g.cap for g in groups if g.cap is not None]
        if caps or self._requested_cap:
            return min(caps)[1] if caps else self._requested_cap[1]
        return min((e.delta for g in groups for e in g.entries if e.delta > 0), default=0.0)

    def projected(self, event: _ev.DpEvent, delta: float | None = None) -> tuple[float, float]:
        groups = self._state()[1]
        delta = self._delta(groups) if delta is None else float(delta)
        rel = self._relation(groups)
        event = self._per_item(event)
        return max(self._with(g.entries, event, "probe", delta, rel) for g in _distinct(groups)), delta

    def _per_item(self, event: _ev.DpEvent) -> _ev.DpEvent:
        """What ``event`` spends on one item: an image stored in several rows is protected as that group of rows
        (:func:`privlin.events.for_rows`), so a per-row guarantee never understates a duplicated image's spend."""
        return for_rows(event, self.scope.rows_per_item)

    def check(self, event: _ev.DpEvent, *, mechanism: str = "mechanism") -> float:
        event = self._per_item(event)
        return self._check_groups(self._state()[1], event, mechanism, self._relation(self._state()[1]))

    def _check_groups(self, groups, event, mechanism, relation) -> float:
        """Every group against its cap (after this handle's request); the worst total, ``nan`` with no cap."""
        worst = math.nan
        for g in _distinct(groups):
            cap = self._cap_after(g.cap)
            if cap is not None:
                total = self._check(g.entries, event, mechanism, cap, relation)
                worst = total if math.isnan(worst) else max(worst, total)
        return worst

    # -- writing -------------------------------------------------------------------------
    def charge(self, event: _ev.DpEvent, *, mechanism: str, epsilon: float, delta: float,
               params: Mapping | None = None, neighbouring=None, entry_id: str | None = None) -> LedgerEntry:
        """Check every item's cap and record ``event`` on these items, in one write transaction of the home. Call it
        *before* reading the items; see :meth:`privlin.ledger.PrivacyLedger.charge`."""
        asked = None if neighbouring is None else accounting.relation_name(neighbouring)
        rows, event = self.scope.rows_per_item, self._per_item(event)  # refused here, before anything is written
        if rows > 1:
            params = {**dict(params or {}), "rows_per_item": rows}
        refused = None
        with self.home.transaction() as txn:
            groups = self._groups(txn.records)
            stored = {g.relation for g in groups if g.relation}
            rel = self._relation(groups) if stored or asked is None else asked
            for other in (self._requested_relation, asked):
                if other is not None and other != rel:
                    raise ValueError(f"the items of {self.label} are charged under {relation_label(rel)} neighbours; "
                                     f"this mechanism is under {relation_label(other)}: they do not compose")
            if entry_id:
                for r in txn.records:
                    if r["kind"] == "entry" and r["body"].get("id") == entry_id:
                        return LedgerEntry.from_dict(r["body"])
            if rows > 1:
                epsilon = accounting.compose_epsilon([event], float(delta), neighbouring=rel) if delta > 0 else epsilon
            entry = LedgerEntry(mechanism=str(mechanism), event=event, epsilon=float(epsilon), delta=float(delta),
                                neighbouring=rel, params=jsonable(dict(params or {})),
                                **({"id": entry_id} if entry_id else {}))
            body = entry.to_dict()  # validate before writing
            for g in groups:  # a budget above a stored cap is refused before anything is written
                self._cap_after(g.cap)
            try:
                self._check_groups(groups, event, entry.mechanism, rel)
            except PrivacyBudgetExceeded as e:
                refused = e
            asked_cap = self._requested_cap
            if asked_cap is not None and any(g.cap != asked_cap for g in groups):  # policy from now on
                txn.append("cap", self.scope, {"epsilon": asked_cap[0], "delta": asked_cap[1], "time": now(),
                                               "note": "set by a charge", "neighbouring": rel})
            if refused is None:
                txn.append("entry", self.scope, body)
        if refused is not None:
            raise refused
        return entry

    def set_cap(self, epsilon: float, delta: float, *, note: str = "") -> None:
        """Set the cap of these items (recorded on their set); raising any item's cap needs a ``note``."""
        cap = check_cap((epsilon, delta))
        with self.home.transaction() as txn:
            groups = self._groups(txn.records)
            for g in groups:
                if g.cap is not None and (cap[0] > g.cap[0] or cap[1] > g.cap[1]) and not str(note).strip():
                    raise ValueError(f"raising the cap of {self.where} from (ε={g.cap[0]:g}, δ={g.cap[1]:g}) to "
                                     f"(ε={cap[0]:g}, δ={cap[1]:g}) needs a note saying why (it is recorded)")
            txn.append("cap", self.scope, {"epsilon": cap[0], "delta": cap[1], "time": now(), "note": str(note),
                                           "neighbouring": self._relation(groups)})
        self._requested_cap = None

    def extend(self, entries: Iterable[LedgerEntry]) -> None:
        """Record existing entries (once each, by id) on these items, checked against their caps."""
        entries = list(entries)
        with self.home.transaction() as txn:
            seen = {r["body"].get("id") for r in txn.records if r["kind"] == "entry"}
            new = [e for e in entries if e.id not in seen]
            if not new:
                return
            groups = self._groups(txn.records)
            self._check_groups(groups, _ev.ComposedDpEvent([e.event for e in new]), "merged entries",
                               self._relation(groups))
            for e in new:
                txn.append("entry", self.scope, e.to_dict())

    def import_entries(self, entries: list[LedgerEntry], caps: list[dict], source: str) -> int:
        """Record ``entries`` and ``caps`` read from a store's ledger file ``source`` on these items, each once
        (by entry id, by the hash of a cap), whatever their total: they were spent already. Returns how many."""
        with self.home.transaction() as txn:
            seen = {r["body"].get("id") for r in txn.records}
            added = 0
            for e in entries:
                if e.id not in seen:
                    txn.append("entry", self.scope, e.to_dict())
                    added += 1
            for c in caps:
                key = "cap-" + hashlib.sha256(json.dumps(c, sort_keys=True).encode()).hexdigest()[:32]
                if key not in seen:
                    txn.append("cap", self.scope, {**c, "id": key, "note": f"{c.get('note') or ''} (from {source})"})
                    added += 1
        return added

    def to_dict(self) -> dict:
        """The items' state: home, item count, groups (items, entry ids, cap) and entries."""
        records, groups = self._state()
        return {"home": self.home.where, "items": len(self.scope), "label": self.label,
                "neighbouring": self._relation(groups),
                "groups": [{"items": g.items, "entries": [e.id for e in g.entries],
                            "cap": None if g.cap is None else list(g.cap)} for g in groups],
                "entries": [e.to_dict() for e in self.entries]}

    # -- display -------------------------------------------------------------------------
    def summary(self, delta: float | None = None) -> str:
        """One line per entry, then each group of items with its total and cap, then the worst item's."""
        records, groups = self._state()
        rel = self._relation(groups)
        delta = self._delta(groups) if delta is None else delta
        entries = self.entries
        lines = self._summary_head(rel, entries)
        if len(groups) > 1:
            for g in groups:
                eps = self._compose(g.entries, delta, rel)
                lines.append(f"  group of {g.items} items: {len(g.entries)} entries, ε={eps:.4g}"
                             + (f", cap ε={g.cap[0]:g}" if g.cap else ""))
        if entries:
            eps = self.spent(delta)[0]
            how = accounting.composition_name(e.event for e in entries)
            lines.append(f"total, worst of {len(self.scope)} items ({how} composition of {len(entries)} entries): "
                         f"ε={eps:.4g} at δ={delta:.3g}")
        cap = self.cap
        lines.append(f"cap: ε={cap[0]:g} at δ={cap[1]:g}" if cap is not None else "cap: none")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"ItemLedger({self.where}, cap={self.cap})"

    def __reduce__(self):
        return (_reopen, (self.home.where, self.scope.values, self.label, self._requested_cap,
                          self._requested_relation, self.scope.rows_per_item))


def _distinct(groups: list[Group]) -> list[Group]:
    """Groups with distinct (entries, cap): composing the same entries twice gives the same number."""
    seen, out = set(), []
    for g in groups:
        key = (tuple(e.id for e in g.entries), g.cap)
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out or [Group(0, [], None, None)]


def home_path() -> str:
    """The ledger home in force (for messages)."""
    return _home.location()


def items_of_split(split) -> np.ndarray:
    """Every row's item of a store split (skipped rows included: a charge covers every row the split holds)."""
    return np.asarray(split.items[:])


def label_of(url, split: str) -> str:
    return f"store {os.fspath(url)}, split {split!r}"
