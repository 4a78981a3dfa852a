"""Dataset names and output paths, checked without reading or importing anything heavy (a typo answers before torch
loads), and the command's error types (importable without torch, so the command line can catch them)."""
from __future__ import annotations

import os

EMBEDDED = ("digits",)
CIFAR = ("cifar10", "cifar100")
KNOWN = "imagenet, cifar10, cifar100, digits, imagefolder:PATH, webdataset (--data-dir) or hf:PATH_OR_NAME"


class DatasetError(ValueError):
    """A dataset name, split or on-disk layout that cannot be used (the message says what was expected)."""


class CorruptImageError(RuntimeError):
    """An image could not be decoded (and ``skip_bad`` was off)."""


def check_name(dataset: str) -> None:
    """Refuse a name that is no dataset kind (reads nothing)."""
    if dataset not in ("imagenet", "webdataset", *EMBEDDED, *CIFAR) and not dataset.startswith(("imagefolder:", "hf:")):
        raise DatasetError(f"unknown dataset {dataset!r}; use {KNOWN}")


def check_out(out) -> None:
    """Refuse an ``--out`` no store can be written at, reading only the file system (no zarr): a file, a folder of
    other files (the refusals of :func:`stores.location.make_store`), or a path under a file or an unwritable
    folder. URLs other than ``file://`` are left to the store."""
    if out is None:
        return
    out = os.fspath(out)
    if "://" in out and not out.startswith("file://"):
        return
    path = os.path.expanduser(out[len("file://"):] if out.startswith("file://") else out)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{path!r} is a file, not a feature store (a folder)")
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "zarr.json")):
        foreign = [e for e in os.listdir(path) if not e.endswith(".partial")]
        if foreign:
            raise ValueError(f"{path!r} is a folder holding other files ({sorted(foreign)[:3]}...), not a feature "
                             "store: choose another --out")
    parent = os.path.abspath(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"--out {path!r}: {parent!r} is a file, so no store can be made under it")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out {path!r}: no permission to write in {parent!r}")
