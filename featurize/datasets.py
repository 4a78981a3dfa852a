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
``webdataset`` (with ``--data-dir DIR``)
    Tar shards as img2dataset and ``webdataset`` write them: a sample is the files sharing a key (the name up to
    the first dot of its base name), one image (``jpg``, ``png``, ...) and its label, ``cls`` (an integer) or
    ``json`` (its ``"label"`` or ``"cls"``). Splits: ``DIR/<split>/*.tar`` for the split folders present, else
    shards named ``DIR/<split>-*.tar`` (or ``_``), else every ``DIR/*.tar`` as one ``train`` split. Read with the
    standard library's ``tarfile`` (no extra needed); uncompressed shards only.
``hf:PATH_OR_NAME``
    A Hugging Face dataset (needs the ``datasets`` extra): a folder written by ``save_to_disk``, a folder of
    parquet/arrow files, or a hub name in the HF cache (``HF_HUB_OFFLINE=1`` never downloads), with its own
    splits. The image column is the one of type ``Image``, the label column the ``ClassLabel`` one (or named
    ``label``); ``hf:NAME#label=fine_label,image=img`` chooses among several.

Row order is deterministic (class, then file name; the file's own order; shard name, then tar order; the dataset's
row order) and ids are stable: the path relative to the split folder, ``<batch file>:<row>`` for CIFAR,
``digits:<index>`` for digits, ``<shard>:<key>`` for webdataset, ``<split>:<row>`` for HF datasets. File names
that are not valid UTF-8 keep their bytes as ``\\xNN`` escapes in ids and class names (a store holds text).
Every row also has an item (:mod:`stores.items`), the identity of the source image the per-image privacy
ledger accounts for, the same whichever store, copy, backbone or DP-MAE run reads it: for images held as files
(image folders, webdataset members, an HF Image column, which holds encoded bytes or names a file) the hash of the
bytes ``images.raw(i)`` returns, computed where the job's workers read them (``items=None`` here); for rows with
no file of their own the hash of a public name, the dataset's published index (``digits:<index>`` as the id,
``cifar10:train:<index>`` with the index counting rows across the batch files in release order): ``items``.
Class lists come from the layout (folder names / metadata), the same for every split; they are public
structure of the dataset, not statistics of its examples: a webdataset's from ``DIR/classes.txt`` (one name a
line, label ``i`` on line ``i``) or ``DIR/classes.json`` (a list), an HF dataset's from its ``ClassLabel`` names.
Without such metadata the split has no class list (``classes=None``, recorded as such): the label values are
then private data, and privlin reads the class set from them only with a ``PrivacyLeakWarning`` (or takes
``classes=``).

Each image file appears once per split: the same file reached twice (a symlink or hard link, a symlink loop, a
second link to a folder) is refused, because a row per path would count one person's image several times and
silently weaken a per-image privacy guarantee by as much; so is a webdataset shard reached twice (in one split or
two). Byte-identical copies under two names are one item in two rows: the job counts and says them
(``repeated_items``). What is read is only the named data: an HF dataset's files outside its folder are refused
(:mod:`featurize.hf`), and a tar's label member over ``MAX_LABEL_BYTES`` is refused before it is read.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import re
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from stores.items import of_bytes, of_name

from .names import EMBEDDED, KNOWN, DatasetError, check_name  # noqa: F401 - EMBEDDED, KNOWN: public here too
from .restricted_pickle import UnsafePickleError, restricted_load
from .split import ImageSplit


def _rgb(im):
    """:func:`featurize.decode.to_rgb`, imported when an image is read: listing a dataset needs no torch."""
    from .decode import to_rgb

    return to_rgb(im)


IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
SPLIT_FOLDERS = ("train", "val", "validation", "test")


class FileImages:
    """Images stored as files; ``read(i)`` decodes file ``i`` to RGB."""

    def __init__(self, paths: list[str]):
        self.paths = paths

    def read(self, i: int) -> Image.Image:
        with Image.open(self.paths[i]) as im:
            return _rgb(im)

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
        return _rgb(Image.fromarray(self.pixels[i]))

    def describe(self, i: int) -> str:
        return f"{self.origin} row {i}"


def row_item(source: ImageSplit, i: int, data: bytes | None = None) -> str:
    """Row ``i``'s item: its public name's (``source.items``), else the hash of its file's bytes ``data`` (those
    ``source.images.raw(i)`` returned, so the bytes decoded are the bytes named: one read)."""
    if source.items is not None:
        return source.items[i]
    if data is None:
        raise ValueError(f"the item of {source.describe(i)} needs its bytes")
    return of_bytes(data)


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
                      attrs={"root": str(root.resolve()), "layout": "cifar-python"},
                      items=[of_name(f"{dataset}:{split}:{i}") for i in range(len(labels))])


# --------------------------------------------------------------------------------------------- embedded

DIGITS_TEST_FRACTION, DIGITS_SEED = 0.2, 0


def digits_rows(split: str) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, labels)`` of the embedded digits' ``split``: the published indices (sorted) of scikit-learn's
    ``load_digits`` it holds, by the public rule ``train_test_split(test_size=0.2, stratify=y, random_state=0)``;
    DP-MAE's ``digits`` takes the same rows (one rule)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    if split not in ("train", "test"):
        raise DatasetError(f"digits has splits ['test', 'train'], not {split!r}")
    y = load_digits().target.astype(np.int64)
    train, test = train_test_split(np.arange(len(y)), test_size=DIGITS_TEST_FRACTION, stratify=y,
                                   random_state=DIGITS_SEED)
    rows = np.sort(train if split == "train" else test)
    return rows, y[rows]


def digits_items(rows) -> list[str]:
    """The items of digits' rows ``rows`` (published indices): the hashes of their names ``digits:<index>``."""
    return [of_name(f"digits:{i}") for i in rows]


def _open_digits(split: str) -> ImageSplit:
    from sklearn.datasets import load_digits
    rows, labels = digits_rows(split)
    pixels = np.rint(load_digits().images[rows] * (255.0 / 16.0)).astype(np.uint8)
    return ImageSplit("digits", split, [f"digits:{i}" for i in rows], labels, [str(c) for c in range(10)],
                      ArrayImages(pixels, f"digits {split}"),
                      attrs={"source": "sklearn.datasets.load_digits",
                             "split_rule": f"train_test_split(test_size={DIGITS_TEST_FRACTION}, stratify=y, "
                                           f"random_state={DIGITS_SEED})"},
                      items=digits_items(rows))


# --------------------------------------------------------------------------------------------- webdataset shards

TAR_IMAGE_EXTENSIONS = tuple(e.lstrip(".") for e in IMAGE_EXTENSIONS)
CLASS_FILES = ("classes.txt", "classes.json")
_TAR_BLOCK = 512
#: A sample's ``.cls``/``.json`` is read whole for its label; a larger one is refused before it is read.
MAX_LABEL_BYTES = 1 << 20


class TarImages:
    """Images stored as members of uncompressed tar shards: ``(shard path, data offset, size)`` per row."""

    def __init__(self, members: list[tuple[str, int, int]]):
        self.members = members

    def read(self, i: int) -> Image.Image:
        with Image.open(io.BytesIO(self.raw(i))) as im:
            return _rgb(im)

    def raw(self, i: int) -> bytes:
        """Member ``i``'s bytes, for decoders that take them (JPEG draft mode, the device's decoder)."""
        path, offset, size = self.members[i]
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(size)
        if len(data) != size:
            raise OSError(f"shard ends after {len(data)} of the image's {size} bytes (truncated)")
        return data

    def describe(self, i: int) -> str:
        path, offset, _ = self.members[i]
        return f"shard {path!r} (member at byte {offset})"


def _wds_layout(root: Path) -> dict[str, list[Path]]:
    """Split -> its shards, sorted: split folders, else split-named shards, else every shard as ``train``."""
    if not root.is_dir():
        raise DatasetError(f"webdataset: folder {str(root)!r} does not exist (pass --data-dir)")
    compressed = sorted(p.name for d in (root, *(root / s for s in SPLIT_FOLDERS)) if d.is_dir() for p in d.iterdir()
                        if p.name.endswith((".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar.zst")))
    if compressed:
        raise DatasetError(f"webdataset: {compressed[:3]} under {str(root)!r} are compressed; only uncompressed .tar "
                           "shards can be read by offset (decompress them)")
    folders = {s: sorted((root / s).glob("*.tar")) for s in SPLIT_FOLDERS if (root / s).is_dir()}
    if folders:
        return _once(root, {s: shards for s, shards in folders.items() if shards})
    flat = sorted(root.glob("*.tar"))
    named = {s: [p for p in flat if re.match(rf"{s}(?:[-_.]|$)", p.name)] for s in SPLIT_FOLDERS}
    named = {s: shards for s, shards in named.items() if shards}
    if named:
        left = sorted(set(p.name for p in flat) - {p.name for shards in named.values() for p in shards})
        if left:
            raise DatasetError(f"webdataset: shards {left[:3]} in {str(root)!r} belong to no split (named "
                               f"{'/'.join(sorted(named))}-*.tar); rename them or move them out")
        return _once(root, named)
    return _once(root, {"train": flat} if flat else {})


def _once(root: Path, layout: dict[str, list[Path]]) -> dict[str, list[Path]]:
    """``layout``, refused if it holds no shard, or if one shard file is reached twice (a symlink or hard link, in
    one split or two): its images would count once per path."""
    if not layout:
        raise DatasetError(f"webdataset: no .tar shards under {str(root)!r} (expected <split>/*.tar, "
                           "<split>-*.tar or *.tar)")
    seen: dict[tuple, str] = {}
    for shards in layout.values():
        for path in shards:
            st = path.stat()
            rel = text(path.relative_to(root).as_posix())
            if (st.st_dev, st.st_ino) in seen:
                raise DatasetError(f"webdataset: shards {rel!r} and {seen[st.st_dev, st.st_ino]!r} are the same file "
                                   "(a symlink or hard link): its images would count twice; keep one of them")
            seen[st.st_dev, st.st_ino] = rel
    return layout


def _wds_classes(root: Path) -> tuple[list[str] | None, str]:
    """The class list from ``classes.txt`` / ``classes.json`` (public metadata), else None."""
    for name in CLASS_FILES:
        path = root / name
        if path.is_file():
            try:
                if name.endswith(".json"):
                    classes = json.loads(path.read_text(encoding="utf-8"))
                else:
                    classes = [line.rstrip("\r") for line in path.read_text(encoding="utf-8").split("\n")]
                    while classes and not classes[-1]:
                        classes.pop()
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise DatasetError(f"webdataset: {str(path)!r} is not readable ({e})") from None
            if not isinstance(classes, list) or not classes or not all(isinstance(c, str) and c for c in classes):
                raise DatasetError(f"webdataset: {str(path)!r} must list one non-empty class name per label")
            if len(set(classes)) != len(classes):
                raise DatasetError(f"webdataset: {str(path)!r} names a class twice")
            return classes, name
    return None, "none: no classes.txt or classes.json beside the shards, so no class list is published"


def _sample_label(shard: str, key: str, files: dict[str, bytes]) -> int:
    if "cls" in files:
        text_label = files["cls"].decode("utf-8", "replace").strip()
    elif "json" in files:
        try:
            meta = json.loads(files["json"])
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise DatasetError(f"webdataset: {shard}: sample {key!r} has an unreadable .json ({e})") from None
        value = meta.get("label", meta.get("cls")) if isinstance(meta, dict) else None
        text_label = str(value) if value is not None and not isinstance(value, bool) else ""
    else:
        raise DatasetError(f"webdataset: {shard}: sample {key!r} has no label (.cls, or .json with 'label')")
    if not re.fullmatch(r"\d+", text_label):
        raise DatasetError(f"webdataset: {shard}: sample {key!r} has label {text_label[:40]!r}, not a class index "
                           "(an integer >= 0)")
    return int(text_label)


def _index_shard(path: Path, rel: str):
    """``(key, (offset, size) of its image, label)`` per sample of one shard, in tar order.

    A shard that stops before its end-of-archive marker (truncated, or a damaged header, which ``tarfile`` would
    take for the end) or whose member runs past the file's end is an error naming it.
    """
    samples: dict[str, dict] = {}
    order: list[str] = []
    try:
        size = path.stat().st_size
        with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r:") as tf:
            for m in tf:
                if not m.isfile():
                    continue
                base = m.name.rsplit("/", 1)[-1]
                if base.startswith(".") or "." not in base:
                    continue
                key = m.name[:len(m.name) - len(base)] + base.split(".", 1)[0]
                ext = base.split(".", 1)[1].lower()
                if m.offset_data + m.size > size:
                    raise DatasetError(f"webdataset: shard {rel!r} is truncated: member {m.name!r} ends at byte "
                                       f"{m.offset_data + m.size} of a {size}-byte file")
                if key not in samples:
                    samples[key] = {"image": None, "files": {}}
                    order.append(key)
                elif order[-1] != key:
                    raise DatasetError(f"webdataset: shard {rel!r} holds sample {key!r} twice (its files are not "
                                       "contiguous): one image would count twice")
                sample = samples[key]
                if ext in TAR_IMAGE_EXTENSIONS:
                    if sample["image"] is not None:
                        raise DatasetError(f"webdataset: shard {rel!r}: sample {key!r} has two images")
                    sample["image"] = (m.offset_data, m.size)
                elif ext in ("cls", "json"):
                    if m.size > MAX_LABEL_BYTES:
                        raise DatasetError(f"webdataset: shard {rel!r}: {m.name!r} holds {m.size} bytes, more than "
                                           f"a label file's {MAX_LABEL_BYTES} (not read)")
                    sample["files"][ext] = tf.extractfile(m).read()
            end = tf.offset
            f.seek(end)
            if f.read(2 * _TAR_BLOCK).strip(b"\0") or end + 2 * _TAR_BLOCK > size:
                raise DatasetError(f"webdataset: shard {rel!r} stops at byte {end} without the tar end-of-archive "
                                   f"marker (truncated or damaged; {size} bytes)")
    except (tarfile.TarError, OSError) as e:
        raise DatasetError(f"webdataset: shard {rel!r} is truncated or not a tar file ({e})") from None
    for key in order:
        if samples[key]["image"] is None:
            raise DatasetError(f"webdataset: shard {rel!r}: sample {key!r} has no image "
                               f"({'/'.join(TAR_IMAGE_EXTENSIONS)})")
        yield key, samples[key]["image"], _sample_label(rel, key, samples[key]["files"])


def _open_webdataset(root: Path, split: str) -> ImageSplit:
    layout = _wds_layout(root)
    if split not in layout:
        raise DatasetError(f"webdataset has splits {sorted(layout)}, not {split!r}")
    classes, source = _wds_classes(root)
    members, ids, labels = [], [], []
    for path in layout[split]:
        rel = text(path.relative_to(root).as_posix())
        for key, (offset, size), label in _index_shard(path, rel):
            if classes is not None and label >= len(classes):
                raise DatasetError(f"webdataset: {rel}: sample {key!r} has label {label}, but {source} lists "
                                   f"{len(classes)} classes")
            members.append((str(path), offset, size))
            ids.append(f"{rel}:{text(key)}")
            labels.append(label)
    if not ids:
        raise DatasetError(f"webdataset: split {split!r} under {str(root)!r} holds no samples")
    return ImageSplit("webdataset", split, ids, np.asarray(labels, dtype=np.int64), classes, TarImages(members),
                      attrs={"root": text(str(root.resolve())), "layout": "webdataset", "classes_source": source,
                             "shards": [text(p.relative_to(root).as_posix()) for p in layout[split]]})


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
        _need_dir(dataset, data_dir)
        return ["train", "test"]
    if dataset == "imagenet":
        return [s for s in ("train", "val") if (_need_dir(dataset, data_dir) / s).is_dir()] or ["train", "val"]
    if dataset.startswith("imagefolder:"):
        return list(_folder_layout(Path(dataset.split(":", 1)[1]).expanduser(), dataset))
    if dataset == "webdataset":
        return list(_wds_layout(_need_dir(dataset, data_dir)))
    if dataset.startswith("hf:"):
        from .hf import hf_splits

        return hf_splits(dataset)
    check_name(dataset)
    raise AssertionError(f"dataset {dataset!r} passed check_name but has no reader")


def open_split(dataset: str, split: str, data_dir: str | os.PathLike | None = None) -> ImageSplit:
    """Rows of one split of ``dataset``.

    Parameters
    ----------
    dataset : str
        ``imagenet``, ``cifar10``, ``cifar100``, ``digits``, ``imagefolder:PATH``, ``webdataset`` or
        ``hf:PATH_OR_NAME`` (see the module docstring).
    split : str
    data_dir : path, optional
        Root of ``imagenet``, the CIFAR releases and ``webdataset`` shards.

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
    if dataset == "webdataset":
        return _open_webdataset(_need_dir(dataset, data_dir), split)
    if dataset.startswith("hf:"):
        from .hf import open_hf

        return open_hf(dataset, split)
    check_name(dataset)
    raise AssertionError(f"dataset {dataset!r} passed check_name but has no reader")
