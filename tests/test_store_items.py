"""Row items in a store: written, checksummed and in the manifests like ids; a default for hand-written rows; stores
written before items existed still read (their items from their ids) and cannot be resumed."""
import json
import os

import numpy as np
import pytest

import stores
from stores import items as item_ids
from stores import layout, location, manifest, seal
from stores.errors import CorruptStoreError, StoreError
from stores.writer import consolidate

N, D, SHARD = 300, 8, 128


def _write(url, items=None, finalize=True):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((N, D)).astype(np.float32), rng.integers(0, 3, N)
    ids = np.array([f"img/{i}.png" for i in range(N)])
    w = stores.create_split(url, "train", n_rows=N, dim=D, dtype="float32", shard_rows=SHARD, chunk_rows=64)
    for s in w.pending():
        a, b = w.shard_bounds(s)
        w.write_shard(s, X[a:b], y[a:b], ids[a:b], items=None if items is None else items[a:b])
    if finalize:
        assert w.finalize()
    return ids


def test_items_round_trip_and_are_checked(tmp_path):
    items = np.array([item_ids.of_bytes(f"image {i}".encode()) for i in range(N)])
    _write(tmp_path / "s.zarr", items)
    sp = stores.open(tmp_path / "s.zarr")["train"]
    assert sp.items_recorded
    np.testing.assert_array_equal(sp.items[:], items)
    np.testing.assert_array_equal(sp.items[5:200], items[5:200])
    stores.open(tmp_path / "s.zarr").verify()
    # a flipped byte in the items chunk is an error naming it, never other items
    path = tmp_path / "s.zarr" / "train" / "items" / "c" / "1"
    raw = bytearray(path.read_bytes())
    raw[20] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptStoreError, match=r"shard 1.*items"):
        stores.open(tmp_path / "s.zarr")["train"].items[:]
    os.remove(path)  # a deleted items chunk too
    with pytest.raises(CorruptStoreError, match="items"):
        stores.open(tmp_path / "s.zarr").verify()


def test_items_default_to_the_ids_as_public_names(tmp_path):
    ids = _write(tmp_path / "s.zarr")
    sp = stores.open(tmp_path / "s.zarr")["train"]
    assert sp.items[:].tolist() == [item_ids.of_name("id:" + i) for i in ids]


def test_malformed_items_write_nothing(tmp_path):
    w = stores.create_split(tmp_path / "s.zarr", "train", n_rows=4, dim=2, dtype="float32")
    bad = np.array([item_ids.of_name("a"), "not-an-item", item_ids.of_name("b"), item_ids.of_name("c")])
    with pytest.raises(ValueError, match="row 1"):
        w.write_shard(0, np.zeros((4, 2)), np.zeros(4, int), np.array(list("abcd")), items=bad)
    assert w.pending() == [0]


def _make_legacy(url):
    """Turn a finished split into one written before items existed: no items array, manifests of four arrays,
    sealed attributes without the marker (what the writer before this change left)."""
    store = location.make_store(str(url), read_only=False)
    doc = json.loads(location.get_bytes(store, "train/zarr.json"))
    attrs = {k: v for k, v in doc["attributes"].items() if k != layout.ITEMS_ATTR}
    lay = layout.SplitLayout.from_attrs(attrs)
    old = tuple(a for a in layout.ROW_ARRAYS if a != "items")
    location.delete_keys(store, [k for k in location.list_keys(store) if k.startswith("train/items/")])
    for s in range(lay.n_shards):
        location.put_bytes(store, f"train/{manifest.manifest_key(s)}",
                           manifest.build(store, "train", "train", s, lay, arrays=old))
    doc["attributes"] = seal.sealed(attrs)
    location.put_bytes(store, "train/zarr.json", json.dumps(doc).encode())
    consolidate(store)


def test_a_store_written_before_items_reads_its_items_from_its_ids(tmp_path):
    ids = _write(tmp_path / "s.zarr", np.array([item_ids.of_name(f"x{i}") for i in range(N)]))
    _make_legacy(tmp_path / "s.zarr")
    st = stores.open(tmp_path / "s.zarr")
    st.verify()
    sp = st["train"]
    assert not sp.items_recorded
    assert sp.items[:].tolist() == [item_ids.of_name("id:" + i) for i in ids]
    assert sp.to_numpy()[0].shape == (N, D)
    with pytest.raises(StoreError, match="before row items"):  # resuming it would leave shards without items
        stores.create_split(tmp_path / "s.zarr", "train", n_rows=N, dim=D, dtype="float32", shard_rows=SHARD,
                            chunk_rows=64)
