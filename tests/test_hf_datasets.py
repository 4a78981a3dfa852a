"""``featurize --dataset hf:PATH_OR_NAME``: Hugging Face datasets (the ``datasets`` extra), offline.

The reference is the image folder holding the same PNG files: features equal row for row, labels too, and the
class list is the dataset's ``ClassLabel`` names.
"""
import pickle

import numpy as np
import pytest

import stores
from datasources import N, by_name, digit_rows, write_folder
from featurize import DatasetError, dataset_splits, extract, open_split
from featurize.__main__ import main
from hubcache import offline_hub  # noqa: F401 - a fixture

datasets = pytest.importorskip("datasets")

RUN = dict(head="cls", dtype="float32", batch_size=8, num_workers=0, shard_rows=8, progress=False)
NAMES = [f"digit-{i}" for i in range(10)]


def digits_dataset(split, *, two_labels=False):
    rows = digit_rows(split)
    features = {"img": datasets.Image(), "label": datasets.ClassLabel(names=NAMES), "name": datasets.Value("string")}
    data = {"img": [{"bytes": png, "path": None} for _, _, png in rows], "label": [lab for _, lab, _ in rows],
            "name": [name for name, _, _ in rows]}
    if two_labels:
        features = {"img": features["img"], "fine": features["label"],
                    "parity": datasets.ClassLabel(names=["even", "odd"]), "name": features["name"]}
        data = {"img": data["img"], "fine": data["label"], "parity": [lab % 2 for lab in data["label"]],
                "name": data["name"]}
    return datasets.Dataset.from_dict(data, features=datasets.Features(features))


def write_parquet(root):
    """The hub's parquet layout: ``data/<split>-00000-of-00001.parquet``, features in the schema metadata."""
    (root / "data").mkdir(parents=True)
    for split in N:
        digits_dataset(split).to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


@pytest.fixture
def folder_store(tmp_path):
    folder = write_folder(tmp_path / "folder")
    out = tmp_path / "folder.zarr"
    extract("vip_toy", f"imagefolder:{folder}", out=out, **RUN)
    return out


def test_parquet_dataset_gives_the_image_folder_features(offline_hub, tmp_path, folder_store):
    root = write_parquet(tmp_path / "pq")
    spec = f"hf:{root}"
    assert dataset_splits(spec) == ["train", "test"]
    out = tmp_path / "hf.zarr"
    assert main(["--backbone", "vip_toy", "--head", "cls", "--dataset", spec, "--out", str(out), "--dtype",
                 "float32", "--num-workers", "0", "--no-progress"]) == 0
    st = stores.open(str(out))
    assert st.attrs["classes"] == NAMES
    for split in N:
        ref = by_name(folder_store, split)
        sp = st[split]
        feats, _ = sp.to_numpy()
        rows = digit_rows(split)
        assert list(sp.ids[:]) == [f"{split}:{i}" for i in range(N[split])]
        assert list(sp.labels[:]) == [lab for _, lab, _ in rows]
        for i, (name, _, _) in enumerate(rows):
            np.testing.assert_array_equal(feats[i], ref[name], err_msg=name)
        assert sp.attrs["source"]["image_column"] == "img" and sp.attrs["source"]["label_column"] == "label"


def test_saved_dataset_dict_columns_chosen_by_name_and_workers_can_unpickle_it(offline_hub, tmp_path):
    root = tmp_path / "saved"
    datasets.DatasetDict({s: digits_dataset(s, two_labels=True) for s in N}).save_to_disk(str(root))
    with pytest.raises(DatasetError, match="several label columns.*#label=COLUMN"):
        open_split(f"hf:{root}", "test")
    parity = open_split(f"hf:{root}#label=parity", "test")
    assert parity.classes == ["even", "odd"]
    assert list(parity.labels) == [lab % 2 for _, lab, _ in digit_rows("test")]
    images = pickle.loads(pickle.dumps(parity.images))  # what a fork-server worker receives
    assert np.array_equal(np.asarray(images.read(3)), np.asarray(open_split("digits", "test").read(3)))
    with pytest.raises(DatasetError, match="has splits"):
        open_split(f"hf:{root}#label=fine", "validation")
    with pytest.raises(DatasetError, match="no column 'nope'"):
        open_split(f"hf:{root}#label=nope", "test")


def test_unlabelled_rows_and_plain_integer_labels(offline_hub, tmp_path):
    ds = digits_dataset("test")
    labels = ds["label"][:]
    labels[4] = -1
    ds.cast_column("label", datasets.Value("int64")).map(lambda r, i: {"label": labels[i]}, with_indices=True) \
        .cast_column("label", datasets.ClassLabel(names=NAMES)).save_to_disk(str(tmp_path / "unlabelled"))
    with pytest.raises(DatasetError, match="row 4 has label -1"):
        open_split(f"hf:{tmp_path / 'unlabelled'}", "train")
    plain = digits_dataset("test").cast_column("label", datasets.Value("int64"))
    plain.save_to_disk(str(tmp_path / "plain"))
    source = open_split(f"hf:{tmp_path / 'plain'}", "train")
    assert source.classes is None and source.attrs["classes_source"].startswith("none")


def test_a_hub_name_not_in_the_offline_cache_is_one_line(offline_hub):
    with pytest.raises(DatasetError) as err:
        open_split("hf:nobody/no-such-dataset", "train")
    msg = str(err.value)
    assert "hf:nobody/no-such-dataset" in msg and "HF_HUB_OFFLINE=1" in msg and "\n" not in msg, msg
    assert str(offline_hub.parent / "datasets") in msg


def test_a_hub_dataset_in_the_hub_cache_loads_offline(offline_hub):
    """What ``hf download --repo-type dataset NAME`` leaves in the cache: the parquet files of a snapshot."""
    import io

    from hubcache import put

    files = {}
    for split in N:
        buf = io.BytesIO()
        digits_dataset(split).to_parquet(buf)
        files[f"data/{split}-00000-of-00001.parquet"] = buf.getvalue()
    commit = put(offline_hub, "privlin-test/digits", files, kind="dataset", commit="c" * 40)
    assert dataset_splits("hf:privlin-test/digits") == ["train", "test"]
    source = open_split("hf:privlin-test/digits", "test")
    assert source.classes == NAMES and source.attrs["hub"] == {"repo": "privlin-test/digits", "revision": commit}
    assert np.array_equal(np.asarray(source.read(2)), np.asarray(open_split("digits", "test").read(2)))


def _files(root):
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def test_a_folder_dataset_writes_nothing_outside_out(offline_hub, tmp_path, monkeypatch):
    """The datasets library wrote its Arrow cache under HF_HOME/datasets; now a temporary folder,
    removed when the job ends, so the only new files are the store's."""
    import tempfile

    folder = write_folder(tmp_path / "folder")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    before = _files(tmp_path)
    out = tmp_path / "out.zarr"
    assert main(["--backbone", "pixels", "--dataset", f"hf:{folder}", "--split", "test", "--out", str(out),
                 "--num-workers", "0", "--no-progress"]) == 0
    import gc

    gc.collect()
    new = {p for p in _files(tmp_path) - before if out not in p.parents}
    assert new == set(), sorted(map(str, new))[:5]
    assert len(stores.open(str(out))["test"]) == N["test"]


def test_data_files_outside_the_dataset_folder_are_refused(offline_hub, tmp_path):
    write_folder(tmp_path / "outside")
    root = tmp_path / "ds"
    root.mkdir()
    (root / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
                                    "    path: ../outside/train/*/*.png\n---\n")
    with pytest.raises(DatasetError, match="data_files names .*outside the dataset's folder") as err:
        open_split(f"hf:{root}", "train")
    assert "\n" not in str(err.value)


def test_an_image_column_naming_a_file_outside_the_dataset_is_refused(offline_hub, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    secret = tmp_path / "elsewhere" / "x.png"
    secret.write_bytes(digit_rows("train")[0][2])
    ds = datasets.Dataset.from_dict({"img": [{"bytes": None, "path": str(secret)}], "label": [0]},
                                    features=datasets.Features({"img": datasets.Image(),
                                                                "label": datasets.ClassLabel(names=NAMES)}))
    (tmp_path / "pq" / "data").mkdir(parents=True)
    ds.to_parquet(str(tmp_path / "pq" / "data" / "train-00000-of-00001.parquet"))  # keeps the path, not the bytes
    with pytest.raises(DatasetError, match="column 'img' names .*outside the dataset's folder"):
        open_split(f"hf:{tmp_path / 'pq'}", "train")
