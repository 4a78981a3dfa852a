"""Item identity: the source item a row came from, named by its content, so every store, copy, backbone and
DP-MAE run of the same images names the same items (the unit a privacy ledger accounts for).

An item is 32 lowercase hex characters: the first 128 bits of a sha256. A file's item is the hash of its bytes,
whatever path reaches it; an item with no file of its own (a built-in dataset's row, an image held as pixels) is
the hash of a public name, such as ``digits:17`` (the dataset's published index). A re-encoded image is a new item.
"""
from __future__ import annotations

import hashlib

import numpy as np

ITEM_CHARS = 32


def of_bytes(data: bytes | memoryview) -> str:
    """The item of a source file: the hash of its bytes."""
    return hashlib.sha256(data).hexdigest()[:ITEM_CHARS]


def of_name(name: str) -> str:
    """The item of a row named publicly rather than by a file (e.g. ``digits:17``, a built-in dataset's index)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"an item name must be non-empty text, got {name!r}")
    return hashlib.sha256(b"privlin.item-name\x00" + name.encode()).hexdigest()[:ITEM_CHARS]


def check(items, n: int | None = None) -> np.ndarray:
    """``items`` as an array of item strings, or a one-line error naming the first malformed one."""
    arr = np.asarray(items).astype(str) if not isinstance(items, np.ndarray) or items.dtype.kind != "U" else items
    if arr.ndim != 1 or (n is not None and arr.shape != (n,)):
        raise ValueError(f"items must have shape ({n if n is not None else 'N'},), got {arr.shape}")
    lengths = np.char.str_len(arr) if arr.size else np.zeros(0, int)
    codes = np.frombuffer(np.ascontiguousarray(arr.astype(f"U{ITEM_CHARS}")).tobytes(), np.uint32)
    codes = codes.reshape(arr.shape[0], ITEM_CHARS)
    hexish = ((codes >= 48) & (codes <= 57)) | ((codes >= 97) & (codes <= 102))
    bad = np.flatnonzero((lengths != ITEM_CHARS) | ~hexish.all(axis=1))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"items must be {ITEM_CHARS} lowercase hex characters; row {i} is {str(arr[i])[:40]!r}")
    return arr
