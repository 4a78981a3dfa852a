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
from .errors import CorruptStoreError, IncompleteStoreError, ShardClaimedError, StoreError
from .reader import FeatureStore, Split, open
from .writer import SplitWriter, check_split, create_split

__all__ = ["open", "create_split", "check_split", "FeatureStore", "Split", "SplitWriter", "StoreError",
           "CorruptStoreError", "IncompleteStoreError", "ShardClaimedError"]
