"""Datasets: embedded digits split, ImageFolder layouts, CIFAR pickles through the restricted unpickler."""
import os
import pickle

import numpy as np
import pytest
from PIL import Image

from featurize import DatasetError, UnsafePickleError, dataset_splits, open_split


def test_digits_split_is_stratified_deterministic_and_disjoint():
    from sklearn.datasets import load_digits
    train, test = open_split("digits", "train"), open_split("digits", "test")
    assert (len(train), len(test)) == (1437, 360)
    assert set(train.ids).isdisjoint(test.ids) and len(set(train.ids) | set(test.ids)) == 1797
    assert open_split("digits", "train").ids == train.ids  # same rows every time
    y = load_digits().target
    for split in (train, test):  # stratified: each class within one example of its 80/20 share
        share = 0.8 if split is train else 0.2
        counts = np.bincount(split.labels, minlength=10)
        assert np.all(np.abs(counts - share * np.bincount(y)) <= 1)
        i = 7
        idx = int(split.ids[i].split(":")[1])
        assert split.labels[i] == y[idx]
        img = np.asarray(split.read(i))
        assert img.shape == (8, 8, 3)
        np.testing.assert_array_equal(img[..., 0], np.rint(load_digits().images[idx] * 255 / 16).astype(np.uint8))


def _write_images(root, layout):
    rng = np.random.default_rng(0)
    for rel in layout:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)).save(path)


def test_imagefolder_splits_share_one_class_list(tmp_path):
    _write_images(tmp_path, ["train/cat/b.png", "train/cat/a.png", "train/dog/x.jpg", "val/dog/y.png",
                             "val/emu/z.png"])
    (tmp_path / "train" / "cat" / "notes.txt").write_text("not an image")
    ds = f"imagefolder:{tmp_path}"
    assert dataset_splits(ds) == ["train", "val"]
    train, val = open_split(ds, "train"), open_split(ds, "val")
    assert train.classes == val.classes == ["cat", "dog", "emu"]
    assert train.ids == ["cat/a.png", "cat/b.png", "dog/x.jpg"] and list(train.labels) == [0, 0, 1]
    assert val.ids == ["dog/y.png", "emu/z.png"] and list(val.labels) == [1, 2]
    assert train.read(0).mode == "RGB"
    with pytest.raises(DatasetError, match="splits"):
        open_split(ds, "test")


def test_imagefolder_without_split_folders_is_one_train_split(tmp_path):
    _write_images(tmp_path, ["a/1.png", "b/2.png"])
    assert dataset_splits(f"imagefolder:{tmp_path}") == ["train"]
    assert open_split(f"imagefolder:{tmp_path}", "train").ids == ["a/1.png", "b/2.png"]


def test_imagenet_needs_its_layout(tmp_path):
    _write_images(tmp_path, ["train/n01/a.JPEG"])
    assert open_split("imagenet", "train", tmp_path).ids == ["n01/a.JPEG"]
    with pytest.raises(DatasetError, match="val"):
        open_split("imagenet", "val", tmp_path)
    with pytest.raises(DatasetError, match="--data-dir"):
        open_split("imagenet", "train")
    with pytest.raises(DatasetError, match="unknown dataset"):
        open_split("mnist", "train")


def _cifar10_release(root, n=4, protocol=2):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, n)]
        batches[name] = (data, labels)
        with open(folder / name, "wb") as f:
            pickle.dump({"batch_label": "x", "labels": labels, "data": data,
                         "filenames": [f"img{i}.png" for i in range(n)]}, f, protocol=protocol)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)], "num_cases_per_batch": n}, f, protocol=protocol)
    return folder, batches


def test_cifar10_pickles_rows_labels_and_pixel_order(tmp_path):
    folder, batches = _cifar10_release(tmp_path)
    train, test = open_split("cifar10", "train", tmp_path), open_split("cifar10", "test", folder)
    assert (len(train), len(test)) == (20, 4) and train.classes[3] == "class3"
    assert train.ids[5] == "data_batch_2:1" and train.labels[5] == batches["data_batch_2"][1][1]
    img = np.asarray(train.read(5))  # channel planes R, G, B of 32x32 each -> HWC
    np.testing.assert_array_equal(img, batches["data_batch_2"][0][1].reshape(3, 32, 32).transpose(1, 2, 0))


def test_cifar100_fine_labels(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    data = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    for name in ("train", "test"):
        with open(folder / name, "wb") as f:
            pickle.dump({"data": data, "fine_labels": [99, 4], "coarse_labels": [1, 2]}, f, protocol=5)
    with open(folder / "meta", "wb") as f:
        pickle.dump({"fine_label_names": [f"c{i}" for i in range(100)]}, f)
    sp = open_split("cifar100", "test", tmp_path)
    assert list(sp.labels) == [99, 4] and sp.ids == ["test:0", "test:1"] and len(sp.classes) == 100


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_crafted_cifar_pickle_is_refused_and_runs_nothing(tmp_path):
    folder, _ = _cifar10_release(tmp_path)
    marker = tmp_path / "code_ran"
    with open(folder / "data_batch_3", "wb") as f:
        pickle.dump({"data": _RunsCode(marker), "labels": [0]}, f, protocol=2)
    with pytest.raises(UnsafePickleError, match="posix.system|os.system"):
        open_split("cifar10", "train", tmp_path)
    assert not marker.exists()
    assert pickle.loads(pickle.dumps(_RunsCode(marker))) == 0 and marker.exists()  # the payload is real


def test_cifar_missing_files_say_what_is_expected(tmp_path):
    with pytest.raises(DatasetError, match="cifar-10-batches-py"):
        open_split("cifar10", "train", tmp_path)


def test_nested_folders_are_listed_files_first_then_subfolders(tmp_path):
    _write_images(tmp_path, ["a/z.png", "a/sub/x.png", "a/sub/deeper/y.png", "a/b.png"])
    assert open_split(f"imagefolder:{tmp_path}", "train").ids == ["a/b.png", "a/z.png", "a/sub/x.png",
                                                                  "a/sub/deeper/y.png"]  # os.walk's order
