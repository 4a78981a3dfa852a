"""Chunked Zarr v3 feature stores: features computed once, read many times by private trainers.

Read::

    import stores
    st = stores.open("feats.zarr")            # path or fsspec URL
    sp = st["train"]
    for X, y in sp.blocks(rows=65536): ...    # bounded memory, row order
    st.verify()                               # every manifest, checksum and metadata seal; every shard done

Write (whole shards, resumable, many writers)::

    w = stores.create_split("feats.zarr", "train", n_rows=N, dim=D, dtype="float16", attrs={...})
    for i in w.pending(): w.write_shard(i, X_i, y_i, ids_i)
    w.finalize()

Damage (a missing, emptied, moved or flipped chunk, damaged metadata) is a :class:`CorruptStoreError` naming the
split, shard and file; ``python -m stores repair PATH`` clears damaged shards and rerunning the job redoes them.
"""
import importlib

from .errors import CorruptStoreError, IncompleteStoreError, ShardClaimedError, StoreError

__all__ = ["open", "create_split", "check_split", "FeatureStore", "Split", "SplitWriter", "StoreError",
           "CorruptStoreError", "IncompleteStoreError", "ShardClaimedError"]

# imported on first use, so ``python -m stores --help`` answers before zarr and NumPy load
_LAZY = {"open": "reader", "FeatureStore": "reader", "Split": "reader", "SplitWriter": "writer",
         "check_split": "writer", "create_split": "writer"}
_MODULES = {"anchor", "buffers", "chunks", "cli", "items", "layout", "location", "manifest", "provenance", "reader",
            "repair", "seal", "writer"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    if name in _MODULES:  # ``stores.repair.repair(...)`` after a bare ``import stores``, as before
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
