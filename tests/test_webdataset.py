"""``featurize --dataset webdataset``: tar shards (img2dataset layout) read with the standard library's tarfile.

The reference is the image folder holding the same PNG files: features must be equal row for row (matched by
name), labels too; sharding across ranks, resume, --skip-bad and damaged shards behave as for image folders.
"""
import io
import tarfile

import numpy as np
import pytest
import zarr
from PIL import Image

import stores
from datasources import N, add, by_name, digit_rows, write_folder, write_shards
from featurize import CorruptImageError, DatasetError, dataset_splits, extract, open_split
from featurize.__main__ import main

RUN = dict(head="cls", dtype="float32", batch_size=8, num_workers=0, shard_rows=8, progress=False)
PIXELS = {**RUN, "head": None}  # the job's bookkeeping without a network's time


def shards_by_folder(root):
    """``root/<split>/{000,001}.tar`` with classes.txt: the rows of each split over two shards."""
    for split in N:
        rows = digit_rows(split)
        half = len(rows) // 2
        write_shards(root / split / "000.tar", rows[:half])
        write_shards(root / split / "001.tar", rows[half:])
    (root / "classes.txt").write_text("".join(f"{i}\n" for i in range(10)))
    return root


@pytest.fixture(scope="module")
def folder_store(tmp_path_factory):
    base = tmp_path_factory.mktemp("wds")
    folder = write_folder(base / "folder")
    out = base / "folder.zarr"
    extract("vip_toy", f"imagefolder:{folder}", out=out, **RUN)
    return out


def test_shards_give_the_image_folder_features(tmp_path, folder_store):
    root = shards_by_folder(tmp_path / "wds")
    out = tmp_path / "wds.zarr"
    assert main(["--backbone", "vip_toy", "--head", "cls", "--dataset", "webdataset", "--data-dir", str(root),
                 "--out", str(out), "--dtype", "float32", "--num-workers", "0", "--no-progress"]) == 0
    st = stores.open(str(out))
    assert st.attrs["classes"] == [str(i) for i in range(10)] and st.attrs["dataset"] == "webdataset"
    for split in N:
        ours, ref = by_name(out, split), by_name(folder_store, split)
        assert sorted(ours) == sorted(ref) and len(ours) == N[split]
        for name in ref:
            np.testing.assert_array_equal(ours[name], ref[name], err_msg=name)
        sp = st[split]
        rows = {name: label for name, label, _ in digit_rows(split)}
        assert [rows[i.rsplit(":", 1)[1]] for i in sp.ids[:]] == list(sp.labels[:])
        assert sp.attrs["source"]["classes_source"] == "classes.txt"
        assert sp.attrs["source"]["shards"] == [f"{split}/000.tar", f"{split}/001.tar"]
    assert list(st["train"].ids[:2]) == ["train/000.tar:d0000", "train/000.tar:d0001"]


def test_split_by_shard_name_json_labels_and_no_public_class_list(tmp_path):
    root = tmp_path / "flat"
    for split in N:
        write_shards(root / f"{split}-000000.tar", digit_rows(split), label_as="json")
    assert dataset_splits("webdataset", root) == ["train", "test"]
    source = open_split("webdataset", "test", root)
    assert source.classes is None and source.attrs["classes_source"].startswith("none")
    assert list(source.labels) == [label for _, label, _ in digit_rows("test")]
    (root / "other-000.tar").write_bytes((root / "test-000000.tar").read_bytes())
    with pytest.raises(DatasetError, match="other-000.tar.*belong to no split"):
        dataset_splits("webdataset", root)
    (root / "other-000.tar").unlink()
    single = tmp_path / "single"
    write_shards(single / "00000.tar", digit_rows("test"))
    assert dataset_splits("webdataset", single) == ["train"]


def test_ranks_and_resume_fill_the_store_one_run_fills(tmp_path):
    root = shards_by_folder(tmp_path / "wds")
    kw = dict(data_dir=root, splits=["test"], **PIXELS)
    extract("pixels", "webdataset", out=tmp_path / "one.zarr", **kw)
    extract("pixels", "webdataset", out=tmp_path / "ranks.zarr", shard="1/2", **kw)
    assert not stores.open(str(tmp_path / "ranks.zarr"))["test"].attrs["complete"]
    extract("pixels", "webdataset", out=tmp_path / "ranks.zarr", shard="0/2", **kw)
    extract("pixels", "webdataset", out=tmp_path / "resumed.zarr", shard="0/2", **kw)
    res = extract("pixels", "webdataset", out=tmp_path / "resumed.zarr", **kw)  # resume: only rank 1's shards
    assert res["splits"][0]["shards"] == 1 and res["splits"][0]["complete"]
    one = zarr.open_group(str(tmp_path / "one.zarr"), mode="r")["test"]
    for other in ("ranks.zarr", "resumed.zarr"):
        g = zarr.open_group(str(tmp_path / other), mode="r")["test"]
        for name in ("features", "labels", "ids", "valid"):
            assert np.array_equal(g[name][:], one[name][:]), (other, name)


def test_undecodable_image_stops_or_is_skipped(tmp_path):
    rows = digit_rows("test")
    rows[5] = (rows[5][0], rows[5][1], b"\x89PNG\r\n\x1a\n not really a png")
    root = tmp_path / "bad"
    write_shards(root / "test-000.tar", rows)
    bad = f"test-000.tar:{rows[5][0]}"
    with pytest.raises(CorruptImageError, match=bad):
        extract("pixels", "webdataset", data_dir=root, out=tmp_path / "a.zarr", **PIXELS)
    extract("pixels", "webdataset", data_dir=root, out=tmp_path / "b.zarr", skip_bad=True, **PIXELS)
    sp = stores.open(str(tmp_path / "b.zarr"))["test"]
    assert sp.attrs["skipped_ids"] == [bad] and len(sp) == N["test"] - 1  # len: rows with features


@pytest.mark.parametrize("damage", ["truncated", "cut_between_members", "garbage_header", "duplicate_key",
                                    "no_label", "no_image", "label_beyond_classes", "compressed"])
def test_damaged_shards_are_named(tmp_path, damage):
    root = tmp_path / "d"
    rows = digit_rows("test")[:6]
    path = write_shards(root / "train" / "000.tar", rows)
    data = path.read_bytes()
    sizes = [512 + -(-len(png) // 512) * 512 + 1024 for _, _, png in rows]  # png header+data, cls header+data
    if damage == "truncated":
        path.write_bytes(data[:sum(sizes[:3]) + 700])
    elif damage == "cut_between_members":
        path.write_bytes(data[:sum(sizes[:3])])
    elif damage == "garbage_header":
        path.write_bytes(data[:sum(sizes[:3])] + b"\x07" * 512 + data[sum(sizes[:3]) + 512:])
    elif damage in ("duplicate_key", "no_label", "no_image"):
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
            add(tf, "a.png", rows[0][2])
            if damage != "no_label":
                add(tf, "a.cls", b"1")
            if damage == "duplicate_key":
                add(tf, "b.png", rows[1][2])
                add(tf, "b.cls", b"2")
                add(tf, "a.json", b'{"label": 1}')
            if damage == "no_image":
                add(tf, "b.cls", b"2")
    elif damage == "label_beyond_classes":
        (root / "classes.txt").write_text("zero\none\n")
    elif damage == "compressed":
        (root / "train" / "001.tar.gz").write_bytes(b"")
    expected = {"truncated": "000.tar.*truncated", "cut_between_members": "000.tar.*end-of-archive",
                "garbage_header": "000.tar.*end-of-archive", "duplicate_key": "'a' twice",
                "no_label": "'a' has no label", "no_image": "'b' has no image",
                "label_beyond_classes": "lists 2 classes", "compressed": "compressed"}[damage]
    with pytest.raises(DatasetError, match=expected):
        open_split("webdataset", "train", root)


def test_samples_are_those_the_webdataset_package_reads(tmp_path):
    """An independent reader: keys, labels and image bytes in the order ``webdataset.WebDataset`` yields them."""
    wds = pytest.importorskip("webdataset")
    root = shards_by_folder(tmp_path / "wds")
    ours = open_split("webdataset", "train", root)
    urls = [str(p) for p in sorted((root / "train").glob("*.tar"))]
    theirs = list(wds.WebDataset(urls, shardshuffle=False, empty_check=False))
    assert [s["__key__"] for s in theirs] == [i.rsplit(":", 1)[1] for i in ours.ids]
    assert [int(s["cls"]) for s in theirs] == list(ours.labels)
    for i, s in enumerate(theirs[:5]):
        path, offset, size = ours.images.members[i]
        with open(path, "rb") as f:
            f.seek(offset)
            assert f.read(size) == s["png"]
    with Image.open(io.BytesIO(theirs[0]["png"])) as im:
        assert np.array_equal(np.asarray(ours.read(0)), np.asarray(im.convert("RGB")))


def test_a_class_list_is_published_only_from_the_classes_file(tmp_path):
    """Without classes.txt the store publishes none, and privlin reads the labels only with a PrivacyLeakWarning."""
    import warnings

    from privlin.data import as_source, public_classes
    from privlin.report import PrivacyLeakWarning

    root = tmp_path / "wds"
    write_shards(root / "test-000.tar", digit_rows("test"))
    extract("pixels", "webdataset", data_dir=root, out=tmp_path / "none.zarr", **PIXELS)
    assert stores.open(str(tmp_path / "none.zarr")).attrs["classes"] is None
    with pytest.warns(PrivacyLeakWarning, match="classes inferred from the private labels"):
        public_classes(as_source(str(tmp_path / "none.zarr"), "test"))
    (root / "classes.txt").write_text("".join(f"{i}\n" for i in range(10)))
    extract("pixels", "webdataset", data_dir=root, out=tmp_path / "file.zarr", **PIXELS)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        classes, leaks = public_classes(as_source(str(tmp_path / "file.zarr"), "test"))
    assert list(classes) == list(range(10)) and leaks == []
