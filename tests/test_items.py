"""Item identity: every row of a store names the source image it came from by content, the same for
every backbone, copy, path spelling and layout of the same images, and the same as DP-MAE names the images it
trains on. Expected items are computed here independently (sha256 of each file's bytes read by this test)."""
import hashlib
import os
import shutil

import numpy as np
import pytest

import stores
from backbones.mae.data import make_source
from datasources import N, digit_rows, write_folder, write_shards
from featurize import extract, open_split

RUN = dict(dtype="float32", batch_size=8, num_workers=0, shard_rows=8, progress=False)


def sha_item(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def store_items(out, split="train") -> dict[str, str]:
    """Row id's last part (file stem / sample key) -> item, as the store records them."""
    sp = stores.open(str(out))[split]
    ids, items = np.asarray(sp.ids[:]), np.asarray(sp.items[:])
    assert len(items) == len(ids) == len(sp)
    return {str(i).replace(".png", "").rsplit("/", 1)[-1].rsplit(":", 1)[-1]: str(t) for i, t in zip(ids, items)}


def expected(split="train") -> dict[str, str]:
    return {name: sha_item(png) for name, _, png in digit_rows(split)}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    base = tmp_path_factory.mktemp("items")
    return write_folder(base / "x" / "imgs")


def test_two_backbones_over_one_folder_record_the_files_items(folder, tmp_path):
    for backbone, head in (("pixels", None), ("vip_toy", "cls")):
        out = tmp_path / f"{backbone}.zarr"
        extract(backbone, f"imagefolder:{folder}", out=out, head=head, **RUN)
        for split in N:
            assert store_items(out, split) == expected(split), (backbone, split)


def test_webdataset_of_the_same_images_names_the_same_items(folder, tmp_path):
    root = tmp_path / "wds"
    for split in N:
        write_shards(root / split / "000.tar", digit_rows(split))
    out = tmp_path / "wds.zarr"
    extract("pixels", "webdataset", data_dir=root, out=out, **RUN)
    for split in N:
        assert store_items(out, split) == expected(split)


def test_every_decode_path_and_a_copy_and_other_spellings_name_the_same_items(folder, tmp_path, monkeypatch):
    copy = tmp_path / "copy" / "imgs"
    shutil.copytree(folder, copy)
    monkeypatch.chdir(folder.parent)
    spellings = [f"imagefolder:{folder}/", "imagefolder:imgs", "imagefolder:../x/imgs", f"imagefolder:{copy}"]
    for k, (dataset, mode) in enumerate(zip(spellings, ("draft", "full", "draft", "full"))):
        out = tmp_path / f"s{k}.zarr"
        extract("pixels", dataset, splits=["train"], out=out, decode_mode=mode, **RUN)
        assert store_items(out) == expected(), dataset


@pytest.mark.parametrize("spelling", ["abs/", "rel", "dotdot"])
def test_dp_mae_names_the_items_a_store_of_that_folder_records(folder, tmp_path, monkeypatch, spelling):
    train = folder / "train"
    monkeypatch.chdir(folder)
    path = {"abs/": f"{train}/", "rel": "train", "dotdot": "../imgs/train"}[spelling]
    source, private = make_source(f"imagefolder:{path}", 16)
    assert private and source.items is None  # known once the pre-flight has read the files
    source.preflight(progress=False)
    out = tmp_path / "store.zarr"
    extract("pixels", f"imagefolder:{train}", out=out, **RUN)
    files = {os.path.basename(p).replace(".png", ""): str(t) for p, t in zip(source.paths, source.items)}
    assert files == store_items(out) == expected()


def test_built_in_datasets_name_rows_by_their_published_index(tmp_path):
    def name_item(name):
        return hashlib.sha256(b"privlin.item-name\x00" + name.encode()).hexdigest()[:32]

    out = tmp_path / "digits.zarr"
    extract("pixels", "digits", splits=["test"], out=out, shard_rows=128, progress=False, num_workers=0)
    sp = stores.open(str(out))["test"]
    assert [str(t) for t in sp.items[:]] == [name_item(str(i)) for i in sp.ids[:]]
    source, _ = make_source("digits", 16)  # DP-MAE's digits: featurize's train rows, the same items
    assert list(source.items) == open_split("digits", "train").items
    assert source.items[0] == name_item(open_split("digits", "train").ids[0])


def test_cifar_rows_are_named_by_their_index_in_the_release(tmp_path):
    from test_datasets import _cifar10_release

    def name_item(name):
        return hashlib.sha256(b"privlin.item-name\x00" + name.encode()).hexdigest()[:32]

    _cifar10_release(tmp_path)  # five train batches of 4 rows: train row 5 is data_batch_2's row 1
    train, test = open_split("cifar10", "train", tmp_path), open_split("cifar10", "test", tmp_path)
    assert train.items[5] == name_item("cifar10:train:5") and test.items[0] == name_item("cifar10:test:0")
    assert len(set(train.items) | set(test.items)) == len(train) + len(test)


def test_a_hugging_face_dataset_of_the_same_files_names_the_same_items(folder, tmp_path):
    pytest.importorskip("datasets")
    from test_hf_datasets import write_parquet

    root = write_parquet(tmp_path / "pq")  # the same PNG bytes, held in the Image column
    out = tmp_path / "hf.zarr"
    extract("pixels", f"hf:{root}", out=out, **RUN)
    for split in N:
        sp = stores.open(str(out))[split]
        assert [str(t) for t in sp.items[:]] == [sha_item(png) for _, _, png in digit_rows(split)]


def test_a_skipped_row_has_an_item_of_the_bytes_read_or_of_its_name_when_none_could_be(folder, tmp_path):
    from stores.items import of_name

    root = tmp_path / "f"
    shutil.copytree(folder / "train", root)
    first = sorted((root / "0").iterdir())
    first[0].write_bytes(b"not an image")
    first[1].unlink()
    os.symlink(tmp_path / "nowhere.png", first[1])  # a dangling link: no bytes to name
    out = tmp_path / "s.zarr"
    res = extract("pixels", f"imagefolder:{root}", out=out, skip_bad=True, **RUN)
    assert len(res["splits"][0]["skipped"]) == 2
    sp = stores.open(str(out))["train"]
    got = dict(zip([str(i) for i in sp.ids[:]], [str(t) for t in sp.items[:]]))
    assert got[f"0/{first[0].name}"] == sha_item(b"not an image")
    assert got[f"0/{first[1].name}"] == of_name(f"unread:imagefolder:{root}:0/{first[1].name}")


def test_byte_identical_copies_in_one_split_are_counted_and_said(folder, tmp_path, capsys):
    from featurize.__main__ import main

    root = tmp_path / "f"
    shutil.copytree(folder / "train", root)
    first = sorted((root / "0").iterdir())
    shutil.copy(first[0], root / "1" / "copy.png")  # the same image under another name and class: a copy, no link
    out = tmp_path / "s.zarr"
    assert main(["--backbone", "pixels", "--dataset", f"imagefolder:{root}", "--out", str(out), "--num-workers",
                 "0", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "NOTE: 1 rows are byte-identical copies of another row's image" in err, err
    sp = stores.open(str(out))["train"]
    items = [str(t) for t in sp.items[:]]
    assert len(items) - len(set(items)) == 1
