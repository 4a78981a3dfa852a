"""Turn a path, fsspec URL or zarr store into a zarr store, and do the few raw-key operations the layout needs.

Kept apart from the layout so the feature store knows nothing about where bytes live (zarr's own split).
"""
from __future__ import annotations

import os

import zarr
import zarr.storage
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync


def make_store(location, *, read_only: bool) -> Store:
    """A zarr store for a local path, an fsspec URL (``memory://``, ``s3://`` ...) or an existing store."""
    if isinstance(location, Store):
        return location.with_read_only(read_only) if location.read_only != read_only else location
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    if not isinstance(location, str):
        raise TypeError(f"a store location must be a path, a URL or a zarr Store, not {type(location).__name__}")
    if "://" in location and not location.startswith("file://"):
        return zarr.storage.FsspecStore.from_url(location, read_only=read_only)
    path = location[len("file://"):] if location.startswith("file://") else location
    if read_only and not os.path.isdir(path):
        raise FileNotFoundError(f"no feature store at {path!r}")
    return zarr.storage.LocalStore(path, read_only=read_only)


def get_text(store: Store, key: str) -> str | None:
    """The text stored under ``key``, or None."""
    buf = sync(store.get(key, prototype=default_buffer_prototype()))
    return None if buf is None else buf.to_bytes().decode()


def set_text_if_absent(store: Store, key: str, text: str) -> str:
    """Write ``text`` under ``key`` unless something is there; return what is there afterwards.

    Atomic on local disks (exclusive create); on object stores it is best effort.
    """
    sync(store.set_if_not_exists(key, default_buffer_prototype().buffer.from_bytes(text.encode())))
    return get_text(store, key)
