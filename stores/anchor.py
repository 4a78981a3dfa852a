"""Where a split's privacy ledger is anchored: the head hash of its chain, the state it chains to, and its entry and
cap counts (what the ledger needs to tell an extension of the anchored state from a rewrite), in the split's sealed
attributes.

A ledger file beside a split can be deleted, emptied or edited by mistake; its anchor lives in metadata the
store itself needs (checksummed: ``seal``), so privlin's ledger fails closed instead of resetting the split's
budget.  Someone who rewrites store and ledger together is not stopped (PRIVACY.md says so).
"""
from __future__ import annotations

import zarr

from . import location, seal
from .errors import CorruptStoreError
from .reader import ANCHOR_KEY as KEY, lagging_copies, quiet
from .writer import consolidate

__all__ = ["has_split", "ledger_anchor", "set_ledger_anchor", "lagging_copies"]

def has_split(url, split: str) -> bool:
    """Whether the store at ``url`` has a split ``split`` to anchor a ledger in (False where there is no store)."""
    try:
        zarr.open_group(location.make_store(url, read_only=True), path=split, mode="r", use_consolidated=False)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, zarr.errors.NodeNotFoundError):
        return False
    except (ValueError, TypeError, KeyError):  # a split is there, its document damaged: _group names it
        return True
    return True


def _group(url, split: str, mode: str) -> tuple[zarr.Group, dict]:
    """The split's own group and its sealed attributes; a missing or damaged document is one
    :class:`CorruptStoreError` naming ``<split>/zarr.json``."""
    store = location.make_store(url, read_only=mode == "r")
    where = f"split {split!r} of {location.describe(url)} ({split}/zarr.json)"
    try:
        with quiet():
            group = zarr.open_group(store, path=split, mode=mode, use_consolidated=False)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, zarr.errors.NodeNotFoundError):
        raise CorruptStoreError(f"{where}: missing, so the split's privacy ledger has no anchor; `python -m stores "
                                "repair` restores it from the consolidated copy", split=split) from None
    except (ValueError, TypeError, KeyError) as e:  # JSONDecodeError, a document that is not an object, ...
        raise CorruptStoreError(f"{where}: unreadable ({' '.join(str(e).split()) or type(e).__name__}); `python -m stores repair` restores it from "
                                "the consolidated copy", split=split) from None
    attrs = dict(group.attrs)
    seal.check(attrs, where, split=split)
    return group, attrs


def ledger_anchor(url, split: str) -> dict | None:
    """The anchor recorded for ``split`` (``{"entries", "caps", "head", "previous"}``; older anchors hold the first
    and third only), or None before its first charge."""
    return _group(url, split, "r")[1].get(KEY)


def set_ledger_anchor(url, split: str, record: dict) -> None:
    """Record the ledger's anchor in the split's attributes (resealed; consolidated metadata rewritten).

    The caller holds the ledger's lock, so two charges never race here.  A crash between the split's document
    and the consolidated copy leaves the copy's anchor one charge behind: :func:`lagging_copies` names that
    state, which is not damage, and the next charge (or ``stores repair``) writes the copy again.
    """
    group, attrs = _group(url, split, "r+")
    store = group.store
    group.attrs.put(seal.sealed({**attrs, KEY: dict(record)}))
    location.fsync_keys(store, [f"{split}/zarr.json"])
    consolidate(store)
