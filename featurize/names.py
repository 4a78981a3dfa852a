"""Dataset names, checked without reading or importing anything heavy (a typo answers before torch loads)."""
from __future__ import annotations

EMBEDDED = ("digits",)
CIFAR = ("cifar10", "cifar100")
KNOWN = "imagenet, cifar10, cifar100, digits, imagefolder:PATH, webdataset (--data-dir) or hf:PATH_OR_NAME"


class DatasetError(ValueError):
    """A dataset name, split or on-disk layout that cannot be used (the message says what was expected)."""


def check_name(dataset: str) -> None:
    """Refuse a name that is no dataset kind (reads nothing)."""
    if dataset not in ("imagenet", "webdataset", *EMBEDDED, *CIFAR) and not dataset.startswith(("imagefolder:", "hf:")):
        raise DatasetError(f"unknown dataset {dataset!r}; use {KNOWN}")
