"""The feature store: round trips, resume, checksums, concurrent writers, bad input."""
import hashlib
import multiprocessing as mp
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest
import zarr

import stores
from stores.__main__ import main as stores_cli

N, D, SHARD, CHUNK = 1000, 24, 256, 64


def make_data(n=N, d=D, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, 10, n)
    ids = np.array([f"img/{i:05d}.png" for i in range(n)])
    return X, y, ids


def write(url, X, y, ids, shards=None, dtype="float32", writer_id="0/1", finalize=True, valid=None):
    w = stores.create_split(url, "train", n_rows=len(X), dim=X.shape[1], dtype=dtype, shard_rows=SHARD,
                            chunk_rows=CHUNK, attrs={"backbone": "test"}, root_attrs={"dataset": "synthetic"},
                            writer_id=writer_id)
    for i in (w.pending() if shards is None else shards):
        a, b = w.shard_bounds(i)
        w.write_shard(i, X[a:b], y[a:b], ids[a:b], None if valid is None else valid[a:b])
    if finalize:
        w.finalize()
    return w


def tree_digest(path):
    """sha256 over every file (name and bytes) except creation-time metadata: what 'identical store' means."""
    h = hashlib.sha256()
    for root, _, files in sorted(os.walk(path)):
        for f in sorted(files):
            p = os.path.join(root, f)
            if f == "zarr.json":
                continue
            h.update(os.path.relpath(p, path).encode())
            h.update(open(p, "rb").read())
    return h.hexdigest()


def data_files(path):
    return {os.path.relpath(os.path.join(r, f), path): open(os.path.join(r, f), "rb").read()
            for r, _, fs in os.walk(path) for f in fs}


def test_float32_round_trip_is_exact(tmp_path):
    X, y, ids = make_data()
    write(tmp_path / "s.zarr", X, y, ids)
    st = stores.open(tmp_path / "s.zarr")
    assert st.splits == ["train"] and "train" in st
    sp = st["train"]
    assert len(sp) == N and sp.dim == D
    X2, y2 = sp.to_numpy()
    assert X2.dtype == np.float32 and np.array_equal(X2, X) and np.array_equal(y2, y)
    assert list(sp.ids[:3]) == list(ids[:3])
    np.testing.assert_array_equal(sp.features[10:20], X[10:20])
    assert sp.attrs["backbone"] == "test" and st.attrs["dataset"] == "synthetic"
    assert {"versions", "created", "split"} <= set(sp.attrs)


def test_float16_error_is_bounded(tmp_path):
    X, y, ids = make_data()
    write(tmp_path / "s.zarr", X, y, ids, dtype="float16")
    X2, _ = stores.open(tmp_path / "s.zarr")["train"].to_numpy(dtype=np.float32)
    # float16 has a 10-bit mantissa: relative rounding error <= 2**-11 for normal numbers
    assert np.all(np.abs(X2 - X) <= 2.0 ** -11 * np.abs(X) + 2.0 ** -24)


def test_layout_has_shards_checksums_and_dimension_names(tmp_path):
    X, y, ids = make_data()
    write(tmp_path / "s.zarr", X, y, ids)
    g = zarr.open_group(tmp_path / "s.zarr", mode="r")["train"]
    feats = g["features"]
    assert feats.metadata.dimension_names == ("sample", "feature")
    assert feats.shards == (SHARD, D) and feats.chunks == (CHUNK, D)
    codec = feats.metadata.codecs[0]
    assert "Crc32c" in repr(codec.codecs) and "Crc32c" in repr(codec.index_codecs)
    for name in ("labels", "ids", "valid", "done"):
        assert "Crc32c" in repr(g[name].metadata.codecs)
    assert os.path.exists(tmp_path / "s.zarr" / "zarr.json")
    assert "consolidated_metadata" in open(tmp_path / "s.zarr" / "zarr.json").read()


def test_blocks_stream_in_row_order_with_bounded_size(tmp_path):
    X, y, ids = make_data()
    write(tmp_path / "s.zarr", X, y, ids)
    sp = stores.open(tmp_path / "s.zarr")["train"]
    sizes, parts = [], []
    for Xb, yb in sp.blocks(rows=100):
        sizes.append(len(yb))
        parts.append(Xb)
        assert Xb.shape[1] == D and yb.dtype == np.int64
    assert max(sizes) == SHARD  # rounded up to whole shards on a local disk, never the whole split
    np.testing.assert_array_equal(np.concatenate(parts), X)
    with pytest.raises(ValueError):
        next(sp.blocks(rows=0))


def test_resume_after_stop_half_way_equals_one_go(tmp_path):
    X, y, ids = make_data()
    write(tmp_path / "one.zarr", X, y, ids)
    w = write(tmp_path / "two.zarr", X, y, ids, shards=[0, 1], finalize=False)
    assert w.pending() == [2, 3] and not w.finalize()
    with pytest.raises(stores.IncompleteStoreError, match="2 of 4 shards"):
        next(stores.open(tmp_path / "two.zarr")["train"].blocks())
    w2 = write(tmp_path / "two.zarr", X, y, ids)  # same command again: skips done shards
    assert w2.pending() == []
    assert not w2.write_shard(0, X[:SHARD], y[:SHARD], ids[:SHARD])  # done shards are skipped
    assert tree_digest(tmp_path / "one.zarr") == tree_digest(tmp_path / "two.zarr")


def test_crash_between_data_and_done_redoes_the_shard(tmp_path, monkeypatch):
    X, y, ids = make_data()
    w = write(tmp_path / "s.zarr", X, y, ids, shards=[0], finalize=False)
    done = w._arrays["done"]

    class Crash(Exception):
        pass

    def crash(*a, **k):
        raise Crash()

    monkeypatch.setattr(type(done), "__setitem__", crash)
    with pytest.raises(Crash):
        w.write_shard(1, X[256:512], y[256:512], ids[256:512])
    monkeypatch.undo()
    assert w.pending() == [1, 2, 3]  # shard 1 has data but is not done: it is redone
    write(tmp_path / "s.zarr", X, y, ids)
    X2, _ = stores.open(tmp_path / "s.zarr")["train"].to_numpy()
    np.testing.assert_array_equal(X2, X)


@pytest.mark.parametrize("target", ["features", "ids", "labels"])
def test_flipped_byte_is_caught_never_returned(tmp_path, target):
    X, y, ids = make_data()
    write(tmp_path / "s.zarr", X, y, ids)
    chunk = tmp_path / "s.zarr" / "train" / target / "c" / ("2/0" if target == "features" else "2")
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 3] ^= 0x01
    chunk.write_bytes(bytes(raw))
    st = stores.open(tmp_path / "s.zarr")
    with pytest.raises(stores.CorruptStoreError) as e:
        st.verify()
    assert e.value.split == "train" and e.value.shard == 2 and e.value.array == target
    assert "shard 2" in str(e.value)
    if target != "ids":
        with pytest.raises(stores.CorruptStoreError, match="shard 2"):
            st["train"].to_numpy()  # the local fast path checks the same checksums
    assert stores_cli(["verify", str(tmp_path / "s.zarr")]) == 1


def test_two_writers_on_one_shard_get_a_clear_error(tmp_path):
    X, y, ids = make_data()
    a = stores.create_split(tmp_path / "s.zarr", "train", n_rows=N, dim=D, dtype="float32", shard_rows=SHARD,
                            chunk_rows=CHUNK, writer_id="rank0")
    b = stores.create_split(tmp_path / "s.zarr", "train", n_rows=N, dim=D, dtype="float32", shard_rows=SHARD,
                            chunk_rows=CHUNK, writer_id="rank1")
    # the claim is what protects: simulate rank0 having claimed shard 0 and died before marking it done
    stores.location.set_text_if_absent(a._store, a._claim_key(0), "rank0")
    with pytest.raises(stores.ShardClaimedError, match="claimed by writer 'rank0'"):
        b.write_shard(0, X[:SHARD], y[:SHARD], ids[:SHARD])
    assert a.write_shard(0, X[:SHARD], y[:SHARD], ids[:SHARD])  # the owner (or its resumed self) may write
    assert b.shards_for(1, 2) == [1, 3] and a.shards_for(0, 2) == [0, 2]


def _rank_job(path, rank, world):
    X, y, ids = make_data()
    w = stores.create_split(path, "train", n_rows=N, dim=D, dtype="float32", shard_rows=SHARD, chunk_rows=CHUNK,
                            attrs={"backbone": "test"}, root_attrs={"dataset": "synthetic"}, writer_id=f"{rank}/{world}")
    for i in w.shards_for(rank, world):
        a, b = w.shard_bounds(i)
        w.write_shard(i, X[a:b], y[a:b], ids[a:b])
    w.finalize()


def test_two_processes_fill_one_store_like_a_single_writer(tmp_path):
    X, y, ids = make_data()
    write(tmp_path / "one.zarr", X, y, ids)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank_job, args=(str(tmp_path / "two.zarr"), r, 2)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0
    stores.create_split(tmp_path / "two.zarr", "train", n_rows=N, dim=D, dtype="float32", shard_rows=SHARD,
                        chunk_rows=CHUNK).finalize()
    X2, y2 = stores.open(tmp_path / "two.zarr")["train"].to_numpy()
    assert np.array_equal(X2, X) and np.array_equal(y2, y)
    one, two = data_files(tmp_path / "one.zarr"), data_files(tmp_path / "two.zarr")
    for key in one:
        if "/c/" in key:
            assert one[key] == two[key], key


def _bad_inputs():
    X, y, ids = make_data(SHARD)
    nan = X.copy(); nan[3, 4] = np.nan
    inf = X.copy(); inf[5, 0] = np.inf
    big = X.copy(); big[0, 0] = 1e6
    return {
        "wrong dimension": (dict(features=X[:, :-1]), ValueError, "shape"),
        "too many rows": (dict(features=np.vstack([X, X[:1]])), ValueError, "shape"),
        "nan": (dict(features=nan), ValueError, "NaN"),
        "inf": (dict(features=inf), ValueError, "inf"),
        "float16 overflow": (dict(features=big), ValueError, "overflows float16"),
        "integer features": (dict(features=X.astype(np.int32)), ValueError, "floating"),
        "float labels": (dict(labels=y.astype(np.float64)), ValueError, "labels"),
        "negative labels": (dict(labels=y - 20), ValueError, ">= 0"),
        "short ids": (dict(ids=ids[:-1]), ValueError, "ids"),
        "shard beyond N": (dict(shard=4), IndexError, "out of range"),
    }


@pytest.mark.parametrize("case", list(_bad_inputs()))
def test_bad_input_is_a_clear_error_and_changes_nothing(tmp_path, case):
    X, y, ids = make_data()
    w = write(tmp_path / "s.zarr", X, y, ids, shards=[0], dtype="float16", finalize=False)
    before = data_files(tmp_path / "s.zarr")
    Xs, ys, idss = make_data(SHARD)
    kwargs, err, match = _bad_inputs()[case]
    args = dict(shard=1, features=Xs, labels=ys, ids=idss) | kwargs
    with pytest.raises(err, match=match):
        w.write_shard(args["shard"], args["features"], args["labels"], args["ids"])
    assert data_files(tmp_path / "s.zarr") == before


def test_bad_layouts_are_refused(tmp_path):
    X, y, ids = make_data()
    write(tmp_path / "s.zarr", X, y, ids, finalize=False, shards=[0])
    with pytest.raises(ValueError, match="exists with layout"):
        stores.create_split(tmp_path / "s.zarr", "train", n_rows=N, dim=D + 1, dtype="float32",
                            shard_rows=SHARD, chunk_rows=CHUNK)
    for kwargs, match in [(dict(n_rows=0), "n_rows"), (dict(dim=-1), "dim"), (dict(dtype="int8"), "dtype"),
                          (dict(shard_rows=100, chunk_rows=64), "multiple")]:
        args = dict(n_rows=10, dim=4, dtype="float32") | kwargs
        with pytest.raises(ValueError, match=match):
            stores.create_split(tmp_path / "t.zarr", "train", **args)
    with pytest.raises(ValueError, match="plain name"):
        stores.create_split(tmp_path / "t.zarr", "a/b", n_rows=10, dim=4)
    with pytest.raises(FileNotFoundError, match="no feature store"):
        stores.open(tmp_path / "missing.zarr")
    with pytest.raises(KeyError, match="splits: \\['train'\\]"):
        stores.open(tmp_path / "s.zarr")["test"]


def test_skipped_rows_are_dropped_and_listed(tmp_path):
    X, y, ids = make_data()
    valid = np.ones(N, dtype=bool)
    valid[[3, 700]] = False
    X[[3, 700]] = 0
    y[[3, 700]] = -1
    write(tmp_path / "s.zarr", X, y, ids, valid=valid)
    sp = stores.open(tmp_path / "s.zarr")["train"]
    assert len(sp) == N - 2
    assert sp.attrs["n_skipped"] == 2 and sp.attrs["skipped_ids"] == [ids[3], ids[700]]
    X2, y2 = sp.to_numpy()
    np.testing.assert_array_equal(X2, X[valid])
    assert (y2 >= 0).all()


def test_memory_url_round_trip():
    X, y, ids = make_data()
    url = f"memory://privlin-test-{uuid.uuid4().hex}/s.zarr"
    write(url, X, y, ids)
    st = stores.open(url)
    X2, y2 = st["train"].to_numpy()
    assert np.array_equal(X2, X) and np.array_equal(y2, y)
    st.verify()


def test_cli_info_and_verify(tmp_path, capsys):
    X, y, ids = make_data()
    write(tmp_path / "s.zarr", X, y, ids)
    assert stores_cli(["info", str(tmp_path / "s.zarr")]) == 0
    out = capsys.readouterr().out
    assert "split train: 1000 rows x 24 float32, 1000 valid, shards 4/4 done" in out
    r = subprocess.run([sys.executable, "-m", "stores", "verify", str(tmp_path / "s.zarr")], capture_output=True,
                       text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0 and "ok:" in r.stdout


def test_blocks_yield_float16_as_stored_and_never_overwrite_a_kept_block(tmp_path):
    X, y, ids = make_data(n=2000)
    write(tmp_path / "s.zarr", X, y, ids, dtype="float16")
    sp = stores.open(tmp_path / "s.zarr")["train"]
    kept = [Xb for Xb, _ in sp.blocks(rows=SHARD)]  # the caller keeps every block
    assert all(b.dtype == np.float16 for b in kept)
    np.testing.assert_array_equal(np.concatenate(kept), X.astype(np.float16))
    pooled = {b.__array_interface__["data"][0] for b in kept[:3]}
    del kept
    addresses = set()
    for Xb, _ in sp.blocks(rows=SHARD):  # the caller lets go of each block: the split's buffers are reused
        addresses.add(Xb.__array_interface__["data"][0])
    assert addresses <= pooled
    as32 = [Xb for Xb, _ in sp.blocks(rows=SHARD, dtype=np.float32)]
    assert as32[0].dtype == np.float32
    assert np.array_equal(np.concatenate(as32), X.astype(np.float16).astype(np.float32))


def test_row_arrays_slice_like_numpy_and_are_verified(tmp_path):
    X, y, ids = make_data()
    write(tmp_path / "s.zarr", X, y, ids)
    sp = stores.open(tmp_path / "s.zarr")["train"]
    np.testing.assert_array_equal(sp.features[250:300], X[250:300])  # across a shard boundary
    np.testing.assert_array_equal(sp.features[5, 3], X[5, 3])
    np.testing.assert_array_equal(sp.features[990:, 2:4], X[990:, 2:4])
    assert sp.labels[-1] == y[-1] and list(sp.ids[::-250]) == list(ids[::-250])
    assert sp.features.shape == (N, D) and len(sp.labels) == N and np.asarray(sp.labels).shape == (N,)
    os.unlink(tmp_path / "s.zarr" / "train" / "labels" / "c" / "3")
    with pytest.raises(stores.CorruptStoreError, match="shard 3, labels"):
        sp.labels[900:]


def test_fast_crc32c_agrees_with_zarrs():
    crc32c = pytest.importorskip("crc32c")
    import google_crc32c
    data = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8)
    for n in (0, 1, 7, 4096, data.size):
        assert crc32c.crc32c(data[:n].tobytes()) == google_crc32c.value(data[:n].tobytes())


def test_another_extraction_names_the_nested_key_that_differs(tmp_path):
    """Two extractions whose backbone configs differ in one nested key: the refusal names that key, short."""
    url = str(tmp_path / "s.zarr")
    config = {"architecture": "vit_small_patch16_224", "pretrained_cfg": {"mean": [0.5] * 3, "std": [0.5] * 3},
              "weights_file": "model.safetensors", "num_classes": 0, "padding": "x" * 200}
    stores.create_split(url, "train", n_rows=4, dim=2, dtype="float32", root_attrs={"backbone_config": config})
    other = {**config, "weights_file": "mine.pth"}
    with pytest.raises(ValueError) as e:
        stores.create_split(url, "test", n_rows=4, dim=2, dtype="float32", root_attrs={"backbone_config": other})
    message = str(e.value)
    assert 'backbone_config.weights_file: store has "model.safetensors", this job "mine.pth"' in message
    assert "\n" not in message and len(message) < 300 and "padding" not in message
