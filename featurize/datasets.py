"""Image datasets by name, each split a list of rows with a stable id, an integer label and a readable image.

Names
-----
``imagenet``
    ImageFolder layout under ``--data-dir``: ``train/<wnid>/*.JPEG`` and ``val/<wnid>/*.JPEG``.
``cifar10``, ``cifar100``
    The python pickle release under ``--data-dir`` (``cifar-10-batches-py/`` or ``cifar-100-python/``, or the
    folder itself), read by a restricted unpickler that cannot run code.
``imagefolder:PATH``
    ``PATH/<split>/<class>/<image>`` for the split folders present among train/val/validation/test, or
    ``PATH/<class>/<image>`` as a single ``train`` split.
``digits``
    scikit-learn's embedded 8x8 digits (1797 images, no download), split 80/20 stratified by label with
    ``random_state=0`` (1437 train / 360 test rows); pixels 0..16 scaled to 0..255 grayscale.

Row order is deterministic (class, then file name; or the file's own order) and ids are stable: the path
relative to the split folder, ``<batch file>:<row>`` for CIFAR, ``digits:<index>`` for digits. File names
that are not valid UTF-8 keep their bytes as ``\\xNN`` escapes in ids and class names (a store holds text).
Class lists come from the layout (folder names / metadata), the same for every split; they are public
structure of the dataset, not statistics of its examples.

Each image file appears once per split: the same file reached twice (a symlink or hard link, a symlink loop, a
second link to a folder) is refused, because a row per path would count one person's image several times and
silently weaken a per-image privacy guarantee by as much.
"""
from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from .decode import to_rgb
from .restricted_pickle import UnsafePickleError, restricted_load

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
SPLIT_FOLDERS = ("train", "val", "validation", "test")
EMBEDDED = ("digits",)


class DatasetError(ValueError):
    """A dataset name, split or on-disk layout that cannot be used (the message says what was expected)."""


class FileImages:
    """Images stored as files; ``read(i)`` decodes file ``i`` to RGB."""

    def __init__(self, paths: list[str]):
        self.paths = paths

    def read(self, i: int) -> Image.Image:
        with Image.open(self.paths[i]) as im:
            return to_rgb(im)

    def raw(self, i: int) -> bytes:
        """File ``i``'s bytes, for decoders that take them (JPEG draft mode, the device's decoder)."""
        with open(self.paths[i], "rb") as f:
            return f.read()

    def describe(self, i: int) -> str:
        return f"file {self.paths[i]!r}"


class ArrayImages:
    """Images held in a ``uint8`` array ``(N, H, W, 3)`` or ``(N, H, W)`` (grayscale)."""

    def __init__(self, pixels: np.ndarray, origin: str):
        self.pixels, self.origin = pixels, origin

    def read(self, i: int) -> Image.Image:
        return to_rgb(Image.fromarray(self.pixels[i]))

    def describe(self, i: int) -> str:
        return f"{self.origin} row {i}"


@dataclass
class ImageSplit:
    """One split of a dataset.

    Attributes
    ----------
    dataset, split : str
    ids : list of str, length N
        Stable row identifiers.
    labels : int64 array (N,)
    classes : list of str
        ``classes[label]`` is the class name.
    images : FileImages or ArrayImages
    attrs : dict
        Where the data came from (root folder, split rule), recorded in the store.
    """

    dataset: str
    split: str
    ids: list
    labels: np.ndarray
    classes: list
    images: object
    attrs: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def read(self, i: int) -> Image.Image:
        return self.images.read(i)

    def describe(self, i: int) -> str:
        return f"{self.images.describe(i)} (id {self.ids[i]!r})"


# --------------------------------------------------------------------------------------------- folder layouts

def text(name: str) -> str:
    """A file name as UTF-8 text: bytes that are not UTF-8 (Python keeps them as surrogates) become ``\\xNN``."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")


def _class_dirs(root: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))


class _Listing:
    """Image files under class folders, in ``os.walk`` order (files, then sub-folders, each sorted), with every
    file and folder identified by (device, inode) so a second path to one of them is refused."""

    def __init__(self, dataset: str, root: Path):
        self.dataset, self.root = dataset, root
        self.paths, self.ids, self.labels = [], [], []
        self._files: dict[tuple, str] = {}
        self._dirs: dict[tuple, str] = {}

    def _rel(self, path: str) -> str:
        return text(Path(os.path.relpath(path, self.root)).as_posix())

    def add_class(self, folder: Path, label: int) -> None:
        self._walk(str(folder), label)

    def _walk(self, folder: str, label: int) -> None:
        st = os.stat(folder)
        key = (st.st_dev, st.st_ino)
        if key in self._dirs:
            raise DatasetError(f"{self.dataset}: folder {self._rel(folder)!r} is {self._dirs[key]!r} again (a symlink "
                               "loop or a second link to one folder): its images would count several times; "
                               "remove the link")
        self._dirs[key] = self._rel(folder)
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
        subdirs = [e.path for e in entries if e.is_dir()]
        for e in entries:
            if e.is_dir() or e.name.startswith(".") or not e.name.lower().endswith(IMAGE_EXTENSIONS):
                continue
            rel = self._rel(e.path)
            try:
                fst = os.stat(e.path)
            except OSError:  # a dangling link: kept, so decoding names it (or --skip-bad records it)
                fst = None
            if fst is not None:
                fkey = (fst.st_dev, fst.st_ino)
                if fkey in self._files:
                    raise DatasetError(f"{self.dataset}: {rel!r} and {self._files[fkey]!r} are the same file (a "
                                       "symlink or hard link): one image would count twice; keep one of them")
                self._files[fkey] = rel
            self.paths.append(e.path)
            self.ids.append(rel)
            self.labels.append(label)
        for sub in subdirs:
            self._walk(sub, label)


def _folder_rows(dataset: str, root: Path, classes: list[str]) -> tuple[list[str], list[str], np.ndarray]:
    listing = _Listing(dataset, root)
    for label, name in enumerate(classes):
        folder = root / name
        if folder.is_dir():
            listing.add_class(folder, label)
    if len(set(listing.ids)) != len(listing.ids):
        raise DatasetError(f"{dataset}: two file names under {text(str(root))!r} give the same id once non-UTF-8 "
                           "bytes are escaped; rename one")
    return listing.paths, listing.ids, np.asarray(listing.labels, dtype=np.int64)


def _folder_layout(root: Path, what: str) -> dict[str, Path]:
    if not root.is_dir():
        raise DatasetError(f"{what}: folder {str(root)!r} does not exist")
    splits = {s: root / s for s in SPLIT_FOLDERS if (root / s).is_dir()}
    return splits or {"train": root}


def _open_folder(dataset: str, root: Path, split: str, *, required: tuple = ()) -> ImageSplit:
    layout = _folder_layout(root, dataset)
    for name in required:
        if not (root / name).is_dir():
            raise DatasetError(f"{dataset}: expected {str(root / name)!r} holding one folder per class "
                               f"(ImageFolder layout: {root}/{{train,val}}/<class>/<image>)")
    if split not in layout:
        raise DatasetError(f"{dataset} has splits {sorted(layout)}, not {split!r}")
    classes = sorted(set().union(*(_class_dirs(p) for p in layout.values())))
    if not classes:
        raise DatasetError(f"{dataset}: no class folders under {str(layout[split])!r}")
    paths, ids, labels = _folder_rows(dataset, layout[split], classes)
    if not paths:
        raise DatasetError(f"{dataset}: no images with extensions {IMAGE_EXTENSIONS} under {str(layout[split])!r}")
    return ImageSplit(text(dataset), split, ids, labels, [text(c) for c in classes], FileImages(paths),
                      attrs={"root": text(str(layout[split].resolve())), "layout": "imagefolder"})


# --------------------------------------------------------------------------------------------- CIFAR pickles

_CIFAR = {
    "cifar10": dict(folder="cifar-10-batches-py", files={"train": [f"data_batch_{i}" for i in range(1, 6)],
                                                         "test": ["test_batch"]},
                    meta="batches.meta", names="label_names", labels="labels"),
    "cifar100": dict(folder="cifar-100-python", files={"train": ["train"], "test": ["test"]},
                     meta="meta", names="fine_label_names", labels="fine_labels"),
}


def _load_pickle(dataset: str, path: Path):
    """A CIFAR pickle through the restricted unpickler; a file that is no pickle is a :class:`DatasetError`."""
    try:
        return restricted_load(path)
    except UnsafePickleError as e:
        raise UnsafePickleError(f"{dataset}: {str(path)!r}: {e}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as e:
        raise DatasetError(f"{dataset}: {str(path)!r} is not a readable CIFAR pickle ({type(e).__name__}: {e})") \
            from None


def _open_cifar(dataset: str, data_dir: Path, split: str) -> ImageSplit:
    spec = _CIFAR[dataset]
    if split not in spec["files"]:
        raise DatasetError(f"{dataset} has splits {sorted(spec['files'])}, not {split!r}")
    root = data_dir / spec["folder"] if (data_dir / spec["folder"]).is_dir() else data_dir
    missing = [f for f in spec["files"][split] + [spec["meta"]] if not (root / f).is_file()]
    if missing:
        raise DatasetError(f"{dataset}: missing {missing} in {str(root)!r}; expected the python release "
                           f"({spec['folder']}/ from https://www.cs.toronto.edu/~kriz/cifar.html) under --data-dir")
    meta = _load_pickle(dataset, root / spec["meta"])
    classes = [str(c) for c in meta[spec["names"]]]
    pixels, labels, ids = [], [], []
    for fname in spec["files"][split]:
        batch = _load_pickle(dataset, root / fname)
        try:
            data = np.asarray(batch["data"], dtype=np.uint8)
            lab = np.asarray(batch[spec["labels"]], dtype=np.int64)
        except (KeyError, TypeError, ValueError) as e:
            raise DatasetError(f"{dataset}: {str(root / fname)!r} is not a CIFAR batch ({e})") from e
        if data.ndim != 2 or data.shape[1] != 3072 or lab.shape != (data.shape[0],):
            raise DatasetError(f"{dataset}: {str(root / fname)!r} has data {data.shape} and labels {lab.shape}, "
                               "expected (n, 3072) and (n,)")
        pixels.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        labels.append(lab)
        ids += [f"{fname}:{i}" for i in range(len(lab))]
    labels = np.concatenate(labels)
    if labels.min() < 0 or labels.max() >= len(classes):
        raise DatasetError(f"{dataset}: labels outside [0, {len(classes)})")
    return ImageSplit(dataset, split, ids, labels, classes,
                      ArrayImages(np.ascontiguousarray(np.concatenate(pixels)), f"{dataset} {split}"),
                      attrs={"root": str(root.resolve()), "layout": "cifar-python"})


# --------------------------------------------------------------------------------------------- embedded

DIGITS_TEST_FRACTION, DIGITS_SEED = 0.2, 0


def _open_digits(split: str) -> ImageSplit:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    if split not in ("train", "test"):
        raise DatasetError(f"digits has splits ['test', 'train'], not {split!r}")
    digits = load_digits()
    y = digits.target.astype(np.int64)
    train, test = train_test_split(np.arange(len(y)), test_size=DIGITS_TEST_FRACTION, stratify=y,
                                   random_state=DIGITS_SEED)
    rows = np.sort(train if split == "train" else test)
    pixels = np.rint(digits.images[rows] * (255.0 / 16.0)).astype(np.uint8)
    return ImageSplit("digits", split, [f"digits:{i}" for i in rows], y[rows], [str(c) for c in range(10)],
                      ArrayImages(pixels, f"digits {split}"),
                      attrs={"source": "sklearn.datasets.load_digits",
                             "split_rule": f"train_test_split(test_size={DIGITS_TEST_FRACTION}, stratify=y, "
                                           f"random_state={DIGITS_SEED})"})


# --------------------------------------------------------------------------------------------- public

def _need_dir(dataset: str, data_dir) -> Path:
    if data_dir is None:
        raise DatasetError(f"dataset {dataset!r} needs --data-dir")
    return Path(data_dir).expanduser()


def dataset_splits(dataset: str, data_dir: str | os.PathLike | None = None) -> list[str]:
    """The split names ``dataset`` offers (reads only folder names)."""
    if dataset == "digits":
        return ["train", "test"]
    if dataset in _CIFAR:
        return ["train", "test"]
    if dataset == "imagenet":
        return [s for s in ("train", "val") if (_need_dir(dataset, data_dir) / s).is_dir()] or ["train", "val"]
    if dataset.startswith("imagefolder:"):
        return list(_folder_layout(Path(dataset.split(":", 1)[1]).expanduser(), dataset))
    raise DatasetError(f"unknown dataset {dataset!r}; use imagenet, cifar10, cifar100, digits or imagefolder:PATH")


def open_split(dataset: str, split: str, data_dir: str | os.PathLike | None = None) -> ImageSplit:
    """Rows of one split of ``dataset``.

    Parameters
    ----------
    dataset : str
        ``imagenet``, ``cifar10``, ``cifar100``, ``digits`` or ``imagefolder:PATH``.
    split : str
    data_dir : path, optional
        Root of ``imagenet`` and the CIFAR releases.

    Raises
    ------
    DatasetError
        Unknown name or split, or files not where the layout says.
    """
    if dataset == "digits":
        return _open_digits(split)
    if dataset in _CIFAR:
        return _open_cifar(dataset, _need_dir(dataset, data_dir), split)
    if dataset == "imagenet":
        return _open_folder("imagenet", _need_dir(dataset, data_dir), split, required=(split,))
    if dataset.startswith("imagefolder:"):
        path = dataset.split(":", 1)[1]
        if not path:
            raise DatasetError("imagefolder needs a path: imagefolder:PATH")
        return _open_folder(dataset, Path(path).expanduser(), split)
    raise DatasetError(f"unknown dataset {dataset!r}; use imagenet, cifar10, cifar100, digits or imagefolder:PATH")
