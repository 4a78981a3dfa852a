"""A ledger file's document: relation, cap history and entries, hash-chained to the state before, and the anchor in
a store split's sealed metadata that says which document the split's ledger file must be (so deleting or
replacing the file is detected, never read as a lower total)."""
from __future__ import annotations

import hashlib
import json
from typing import Mapping

from .. import accounting
from .budget import check_cap
from .entry import LedgerEntry
from .home import LedgerDamaged

__all__ = ["FORMAT", "LEDGER_FILENAME", "Document", "StoreAnchor", "anchor_record", "ledger_path", "read"]

FORMAT = "privlin.ledger/2"
LEDGER_FILENAME = "privacy_ledger.json"


def ledger_path(store_url: str, split: str) -> str:
    """Where the ledger file of ``split`` of the store at ``store_url`` lives (a store kept one before the home)."""
    if not isinstance(split, str) or not split or "/" in split or split in (".", ".."):
        raise ValueError(f"split must be a plain name, got {split!r}")
    return str(store_url).rstrip("/") + "/" + split + "/" + LEDGER_FILENAME


def _head(previous: str, neighbouring, caps, entries) -> str:
    """sha256 of a ledger state (relation, caps, entries), chained to the state before."""
    body = json.dumps({"previous": previous, "neighbouring": neighbouring, "caps": caps,
                       "entries": [e.to_dict() for e in entries]}, sort_keys=True, separators=(",", ":"),
                      allow_nan=False)
    return hashlib.sha256(body.encode()).hexdigest()


class Document:
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
        return check_cap((self.caps[-1]["epsilon"], self.caps[-1]["delta"])) if self.caps else None

    def to_dict(self) -> dict:
        """The document of this state, chained to the one it was read as."""
        head = _head(self.head, self.neighbouring, self.caps, self.entries)
        return {"format": FORMAT, "neighbouring": self.neighbouring, "caps": self.caps,
                "entries": [e.to_dict() for e in self.entries], "previous": self.head, "head": head}


class StoreAnchor:
    """A split ledger's anchor in the split's sealed metadata (``stores.anchor``): what :func:`anchor_record` gives."""

    def __init__(self, url: str, split: str):
        self.url, self.split = url, split

    def get(self):
        from stores.anchor import ledger_anchor

        return ledger_anchor(self.url, self.split)

    def set(self, record: dict) -> None:
        from stores.anchor import set_ledger_anchor

        set_ledger_anchor(self.url, self.split, record)


def anchor_record(data: dict) -> dict:
    """What an anchor commits to: the state's head, the state it was chained to, and its entry and cap counts, so
    the anchored state can be recomputed from any ledger that extends it (:func:`_extends`)."""
    return {"entries": len(data["entries"]), "caps": len(data["caps"]), "head": data["head"],
            "previous": data["previous"]}


def _extends(doc: Document, anchored: Mapping) -> bool:
    """Whether ``doc`` is one write past the anchored state: chained to it, and holding its caps and entries
    unchanged as a prefix (a crash between the ledger's write and the anchor's move leaves exactly that)."""
    n, c = int(anchored.get("entries", -1)), anchored.get("caps")
    if doc.previous != anchored.get("head") or not 0 <= n <= len(doc.entries):
        return False
    if c is None or "previous" not in anchored:  # an anchor written before it committed to its prefix
        return n < len(doc.entries)
    return int(c) <= len(doc.caps) and _head(anchored["previous"], doc.neighbouring, doc.caps[:int(c)],
                                             doc.entries[:n]) == anchored["head"]


def read(data: dict | None, where: str, anchor=None) -> Document:
    """The document stored as ``data`` at ``where``, checked against its hash chain and, given an ``anchor``
    (``get() -> record | None``), against the state the anchor records."""
    doc = Document(data, where)
    if anchor is not None:
        recorded = anchor.get()
        if recorded and recorded["head"] != doc.head and not _extends(doc, recorded):
            raise LedgerDamaged(
                f"privacy ledger {where} is {'missing' if not doc.head else 'not the one'} the store "
                f"records ({recorded['entries']} entries, head {recorded['head'][:12]}): deleted, replaced or "
                f"edited; the split's budget cannot be read (restore the file from a backup)")
    return doc
