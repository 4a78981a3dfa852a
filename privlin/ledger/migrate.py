"""A store split's ledger in the home, and the import of the ledger file a store kept before the home existed.

The first time a split is opened for charging, its ``<split>/privacy_ledger.json`` (checked against its hash chain
and the anchor in the split's sealed metadata, as before) is imported into the home: every entry and cap charged to
the split's items, once each (by entry id, by a cap's hash), so a copy of the store imports nothing twice. A file
that cannot be read, or that the split's anchor says was deleted, is a one-line :class:`LedgerDamaged` naming it,
never a reset.
"""
from __future__ import annotations

import os

from . import storage
from .document import StoreAnchor, ledger_path, read
from .home import LedgerDamaged
from .items import ItemLedger, label_of

__all__ = ["split_ledger", "import_store_ledger"]


def split_ledger(store_url, split: str, *, home=None, **kwargs) -> ItemLedger:
    """The :class:`ItemLedger` of every row of ``split`` in the store at ``store_url`` (its store ledger imported)."""
    import stores

    url = os.fspath(store_url)
    st = stores.open(url)
    if split not in st.splits:
        raise FileNotFoundError(f"no split {split!r} in the store at {url} (its splits: {st.splits})")
    sp = st[split]
    led = ItemLedger(sp.item_bytes(), home=home, label=label_of(url, split), **kwargs)
    import_store_ledger(url, split, led)
    return led


def import_store_ledger(url: str, split: str, led: ItemLedger) -> int:
    """Import the split's ledger file into ``led``'s home (idempotent); returns how many records were added."""
    import fsspec
    from stores.anchor import ledger_anchor

    path = ledger_path(url, split)
    fs, p = fsspec.core.url_to_fs(path)
    anchored = ledger_anchor(url, split)
    if not fs.exists(p) and not anchored:
        return 0
    try:
        where = storage.canonical(path)
        doc = read(storage.backend(where, 60.0).read(), where, StoreAnchor(url, split))
    except (LedgerDamaged, ValueError, OSError) as e:
        why = " ".join(str(e).split())
        raise LedgerDamaged(f"the store's ledger {path} cannot be imported into the ledger home: {why}") from None
    return led.import_entries(doc.entries, doc.caps, path)

