"""Reading a feature store: lazy arrays, streaming row blocks, and a full checksum verification."""
from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import zarr

from . import fastread, location
from .errors import CorruptStoreError, IncompleteStoreError
from .layout import FORMAT, SplitLayout


def open(url) -> "FeatureStore":  # noqa: A001 - mirrors zarr.open / stores.open in the docs
    """Open a feature store read-only: a local path, an fsspec URL (``memory://``, ``s3://``...) or a zarr Store."""
    store = location.make_store(url, read_only=True)
    try:
        root = zarr.open_group(store, mode="r")
    except (FileNotFoundError, zarr.errors.GroupNotFoundError) as e:
        raise FileNotFoundError(f"no feature store at {url!r}") from e
    return FeatureStore(root, url)


def _checked(read, *, split, shard, array):
    """Run a chunk read, turning a failed checksum into :class:`CorruptStoreError` (never return bad bytes)."""
    try:
        return read()
    except ValueError as e:
        if "checksum" not in str(e).lower():
            raise
        raise CorruptStoreError(f"split {split!r}, shard {shard}, array {array!r}: {e}",
                                split=split, shard=shard, array=array) from e


class FeatureStore:
    """A group of splits written by one (backbone, head, dataset) extraction."""

    def __init__(self, root: zarr.Group, url):
        self._root, self.url = root, url

    @property
    def attrs(self) -> dict:
        return dict(self._root.attrs)

    @property
    def splits(self) -> list[str]:
        return sorted(name for name, g in self._root.groups() if g.attrs.get("format") == FORMAT)

    def __getitem__(self, split: str) -> "Split":
        if split not in self.splits:
            raise KeyError(f"no split {split!r} in {self.url!r}; splits: {self.splits}")
        return Split(self._root[split], split)

    def __contains__(self, split: str) -> bool:
        return split in self.splits

    def __repr__(self) -> str:
        return f"FeatureStore({self.url!r}, splits={self.splits})"

    def verify(self) -> None:
        """Read every chunk of every split (checksums) and check every shard is done.

        Raises
        ------
        CorruptStoreError
            Naming the split, shard and array of the first bad chunk or missing shard.
        """
        for name in self.splits:
            self[name].verify()


class Split:
    """One split: ``features`` (N, D), ``labels`` (N,), ``ids`` (N,), lazily read.

    ``len(split)`` counts the valid rows (rows skipped at extraction are dropped by every reader).
    """

    def __init__(self, group: zarr.Group, name: str):
        self._group, self.name = group, name
        self.layout = SplitLayout.from_attrs(group.attrs)
        self._valid = None

    features = property(lambda self: self._group["features"], doc="zarr array (N, D); slicing returns NumPy")
    labels = property(lambda self: self._group["labels"], doc="zarr array (N,) int64")
    ids = property(lambda self: self._group["ids"], doc="zarr array (N,) str: stable row identifiers")
    dim = property(lambda self: self.layout.dim, doc="feature dimension D")

    @property
    def attrs(self) -> dict:
        return dict(self._group.attrs)

    def __repr__(self) -> str:
        return f"Split({self.name!r}, n={self.layout.n_rows}, dim={self.dim}, dtype={self.layout.dtype})"

    def _shard_of(self, row: int) -> int:
        return row // self.layout.shard_rows

    def _require_done(self) -> None:
        done = np.asarray(self._group["done"][:], dtype=bool)
        if not done.all():
            missing = np.flatnonzero(~done)
            raise IncompleteStoreError(
                f"split {self.name!r} has {missing.size} of {done.size} shards not written "
                f"(first: {missing[:8].tolist()}); rerun the extraction job to finish it")

    def _read(self, array: str, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of ``array``; a checksum failure names the exact shard it is in."""
        try:
            return _checked(lambda: self._group[array][start:stop], split=self.name,
                            shard=self._shard_of(start), array=array)
        except CorruptStoreError:
            for shard in range(self._shard_of(start), self._shard_of(stop - 1) + 1):
                a, b = self.layout.shard_bounds(shard)
                _checked(lambda: self._group[array][a:b], split=self.name, shard=shard, array=array)
            raise

    def valid_mask(self) -> np.ndarray:
        """Bool (N,): False for rows skipped at extraction."""
        if self._valid is None:
            self._valid = np.asarray(self._read("valid", 0, self.layout.n_rows), dtype=bool)
        return self._valid

    def __len__(self) -> int:
        return int(self.valid_mask().sum())

    def blocks(self, rows: int = 65536, dtype=None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(X, y)`` NumPy blocks in row order without loading the split.

        Parameters
        ----------
        rows : int
            Rows per block, rounded up to whole shards (local disk) or chunks, so no chunk is read twice.
        dtype : numpy dtype, optional
            Cast features to this dtype (default: as stored).

        Yields
        ------
        X : ndarray (b, D)
        y : ndarray (b,) int64
        """
        if rows <= 0:
            raise ValueError(f"rows must be positive, got {rows}")
        self._require_done()
        valid = self.valid_mask()
        fast = fastread.supported(self.features)
        unit = self.layout.shard_rows if fast else self.layout.chunk_rows
        step = -(-int(rows) // unit) * unit
        for start in range(0, self.layout.n_rows, step):
            stop = min(start + step, self.layout.n_rows)
            X = self._read_features_fast(start, stop) if fast else self._read("features", start, stop)
            y = self._read("labels", start, stop)
            keep = valid[start:stop]
            if not keep.all():
                X, y = X[keep], y[keep]
            if dtype is not None:
                X = X.astype(dtype, copy=False)
            yield X, y

    def _read_features_fast(self, start: int, stop: int) -> np.ndarray:
        """Whole shards ``[start, stop)`` read in parallel threads straight into one array (see ``fastread``)."""
        reader = fastread.LocalShardReader(self.features, self.layout, self.name)
        out = np.empty((stop - start, self.dim), dtype=self.layout.dtype)
        first = start // self.layout.shard_rows
        jobs = []
        for shard in range(first, -(-stop // self.layout.shard_rows)):
            a, b = self.layout.shard_bounds(shard)
            jobs.append((shard, out[a - start:b - start]))
        list(_io_pool().map(lambda job: reader.read_into(*job), jobs))
        return out

    def to_numpy(self, dtype=None) -> tuple[np.ndarray, np.ndarray]:
        """All valid rows as ``(X (n, D), y (n,))``."""
        n = len(self)
        X = np.empty((n, self.dim), dtype=dtype or self.layout.dtype)
        y = np.empty(n, dtype=np.int64)
        at = 0
        for Xb, yb in self.blocks(dtype=dtype):
            X[at:at + len(yb)], y[at:at + len(yb)] = Xb, yb
            at += len(yb)
        return X, y

    def verify(self) -> None:
        """Check every shard is done and every chunk of every array passes its checksum."""
        try:
            self._require_done()
        except IncompleteStoreError as e:
            raise CorruptStoreError(str(e), split=self.name, array="done") from e
        for shard in range(self.layout.n_shards):
            start, stop = self.layout.shard_bounds(shard)
            for array in ("features", "labels", "ids", "valid"):
                _checked(lambda: self._group[array][start:stop], split=self.name, shard=shard, array=array)


_POOL = None


def _io_pool() -> ThreadPoolExecutor:
    """Threads that read and checksum shards (both release the GIL), shared by every split."""
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2)), thread_name_prefix="stores-io")
    return _POOL
