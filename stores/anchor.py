"""Where a split's privacy ledger is anchored: the length and head hash of its entry chain, in the split's
sealed attributes.

A ledger file beside a split can be deleted, emptied or edited by mistake; its anchor lives in metadata the
store itself needs (checksummed: ``seal``), so privlin's ledger fails closed instead of resetting the split's
budget.  Someone who rewrites store and ledger together is not stopped (PRIVACY.md says so).
"""
from __future__ import annotations

import zarr

from . import location, seal
from .writer import consolidate

__all__ = ["has_split", "ledger_anchor", "set_ledger_anchor"]

KEY = "privacy_ledger"


def has_split(url, split: str) -> bool:
    """Whether the store at ``url`` has a split ``split`` to anchor a ledger in (False where there is no store)."""
    try:
        zarr.open_group(location.make_store(url, read_only=True), path=split, mode="r", use_consolidated=False)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, zarr.errors.NodeNotFoundError):
        return False
    return True


def ledger_anchor(url, split: str) -> dict | None:
    """``{"entries": n, "head": sha256 hex}`` recorded for ``split``, or None before its first charge."""
    group = zarr.open_group(location.make_store(url, read_only=True), path=split, mode="r", use_consolidated=False)
    attrs = dict(group.attrs)
    seal.check(attrs, f"split {split!r} of {url}", split=split)
    return attrs.get(KEY)


def set_ledger_anchor(url, split: str, entries: int, head: str) -> None:
    """Record the ledger's length and head in the split's attributes (resealed; consolidated metadata rewritten).

    The caller holds the ledger's lock, so two charges never race here.
    """
    store = location.make_store(url, read_only=False)
    group = zarr.open_group(store, path=split, mode="r+", use_consolidated=False)
    attrs = dict(group.attrs)
    seal.check(attrs, f"split {split!r} of {url}", split=split)
    group.attrs.put(seal.sealed({**attrs, KEY: {"entries": int(entries), "head": str(head)}}))
    location.fsync_keys(store, [f"{split}/zarr.json"])
    consolidate(store)
