"""Turn a path, fsspec URL or zarr store into a zarr store, and do the few raw-key operations the layout needs.

Kept apart from the layout so the feature store knows nothing about where bytes live (zarr's own split). On a
local disk it also makes writes durable (fsync: zarr's local store does not, so a host crash could leave a
shard marked done over data that never reached the disk) and clears the temporary files of writes a killed
process left behind.
"""
from __future__ import annotations

import asyncio
import glob
import os

import zarr
import zarr.storage
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from .errors import NotAStoreError, StoreError

PARTIAL_GLOB = ".*.partial"  # zarr's local store writes KEY.<uuid>.partial, then renames it to KEY


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
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotAStoreError(f"{path!r} is a file, not a feature store (a folder)")
    if read_only and not os.path.isdir(path):
        raise FileNotFoundError(f"no feature store at {path!r}")
    if not read_only and os.path.isdir(path) and not os.path.exists(os.path.join(path, "zarr.json")):
        foreign = [e for e in os.listdir(path) if not e.endswith(".partial")]
        if foreign:
            raise StoreError(f"{path!r} is a folder holding other files ({sorted(foreign)[:3]}...), not a feature "
                             "store: choose another --out")
    return zarr.storage.LocalStore(path, read_only=read_only)


def describe(location) -> str:
    """How messages name a store location: the path or URL as given."""
    return repr(os.fspath(location)) if isinstance(location, (str, os.PathLike)) else repr(location)


def local_root(store: Store) -> str | None:
    """The folder of a local store, or None for any other store."""
    return str(store.root) if isinstance(store, zarr.storage.LocalStore) else None


def get_bytes(store: Store, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
    """The bytes under ``key`` (or a range of them), or None when the key is absent."""
    root = local_root(store)
    if root is not None and byte_range is None:  # a plain read: no trip through zarr's event loop
        try:
            with open(os.path.join(root, key), "rb") as f:
                return f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
    buf = sync(store.get(key, prototype=default_buffer_prototype(), byte_range=byte_range))
    return None if buf is None else buf.to_bytes()


def get_buffer(store: Store, key: str):
    """The bytes under ``key`` as a NumPy ``uint8`` array without a copy, or None when the key is absent."""
    buf = sync(store.get(key, prototype=default_buffer_prototype()))
    return None if buf is None else buf.as_numpy_array().view("u1").reshape(-1)


def get_many(store: Store, keys: list[str], byte_ranges: list | None = None) -> list[bytes | None]:
    """Several keys (or ranges of them) fetched concurrently: object stores answer in parallel."""
    async def fetch():
        proto = default_buffer_prototype()
        ranges = byte_ranges or [None] * len(keys)
        bufs = await asyncio.gather(*(store.get(k, prototype=proto, byte_range=r) for k, r in zip(keys, ranges)))
        return [None if b is None else b.to_bytes() for b in bufs]
    return sync(fetch())


def get_size(store: Store, key: str) -> int:
    return int(sync(store.getsize(key)))


def get_text(store: Store, key: str) -> str | None:
    """The text stored under ``key``, or None."""
    raw = get_bytes(store, key)
    return None if raw is None else raw.decode()


def put_bytes(store: Store, key: str, data: bytes) -> None:
    sync(store.set(key, default_buffer_prototype().buffer.from_bytes(data)))


def set_text_if_absent(store: Store, key: str, text: str) -> str:
    """Write ``text`` under ``key`` unless something is there; return what is there afterwards.

    Atomic on local disks (exclusive create); on object stores it is best effort.
    """
    sync(store.set_if_not_exists(key, default_buffer_prototype().buffer.from_bytes(text.encode())))
    return get_text(store, key)


def list_dir(store: Store, prefix: str) -> list[str]:
    """Names directly under ``prefix`` (keys and folders)."""
    async def names():
        return [name async for name in store.list_dir(prefix)]
    return sync(names())


def list_keys(store: Store, suffix: str = "") -> list[str]:
    """Every key of the store that ends with ``suffix``, sorted."""
    async def keys():
        return sorted([k async for k in store.list() if k.endswith(suffix)])
    return sync(keys())


def delete_keys(store: Store, keys) -> None:
    for key in keys:
        sync(store.delete(key))


def fsync_keys(store: Store, keys) -> None:
    """Force the files under ``keys`` and their folders onto the disk (local stores; object stores need nothing)."""
    root = local_root(store)
    if root is None:
        return
    folders = set()
    for key in keys:
        path = os.path.join(root, key)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        folder = os.path.dirname(path)
        while len(folder) >= len(root):  # a new folder's own entry lives in its parent
            folders.add(folder)
            folder = os.path.dirname(folder)
    for folder in sorted(folders):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_partials(store: Store, keys=None) -> list[str]:
    """Delete temporary files of interrupted writes: of ``keys`` only (safe for their owner), or all (no writer
    may be running). Returns the paths removed."""
    root = local_root(store)
    if root is None:
        return []
    pattern = [os.path.join(glob.escape(root), glob.escape(k) + PARTIAL_GLOB) for k in keys] if keys is not None \
        else [os.path.join(glob.escape(root), "**", "*.partial")]
    removed = []
    for pat in pattern:
        for path in glob.glob(pat, recursive=True):
            os.unlink(path)
            removed.append(path)
    return removed
