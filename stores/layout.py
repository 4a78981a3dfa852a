"""The on-disk layout of a split: which arrays, their chunking and codecs.

One split = one zarr group holding ``features`` (N, D), ``labels`` (N,), ``ids`` (N,), ``items`` (N,), ``valid``
(N,) and ``done`` (n_shards,). ``items`` (each row's source item, ``stores.items``) exists in splits whose sealed
attributes say so (:data:`ITEMS_ATTR`); splits written before it have none and read their items from their ids
(:func:`default_items`). Every array is cut at the same row boundaries (one *shard* = ``shard_rows`` rows), so a
writer that owns a shard owns every byte of it in every array: concurrent writers never share a chunk file.
Every chunk carries a crc32c checksum, so a flipped byte is an error, never data; each done shard also has a
manifest (see ``manifest``) so a missing, empty, moved or swapped chunk file is an error too. Array metadata is
a function of the layout (:func:`expected_metadata`), so it is checked, not trusted.
"""
from __future__ import annotations

import functools
import json
import warnings
from dataclasses import asdict, dataclass

import numpy as np
import zarr
import zarr.storage
from zarr.codecs import Crc32cCodec
from zarr.core.buffer import default_buffer_prototype

FORMAT = "privlin-feature-store/2"  # /1 had no manifests and no checksummed metadata
ARRAYS = ("features", "labels", "ids", "items", "valid", "done")
ROW_ARRAYS = ("features", "labels", "ids", "items", "valid")  # cut into one chunk file per shard
ITEMS_ATTR = "row_items"  # sealed split attribute: True where the split has an ``items`` array
FEATURE_DTYPES = ("float16", "float32")
SHARD_TARGET_BYTES = 16 << 20  # shards of ~16 MiB: big sequential reads, few files
CHUNK_TARGET_BYTES = 1 << 20  # inner chunks of ~1 MiB: the unit a checksum covers


@dataclass(frozen=True)
class SplitLayout:
    """Sizes fixed when a split is created; a resumed writer must agree with them."""

    n_rows: int
    dim: int
    dtype: str
    shard_rows: int
    chunk_rows: int

    @property
    def n_shards(self) -> int:
        return -(-self.n_rows // self.shard_rows)

    def shard_bounds(self, shard: int) -> tuple[int, int]:
        if not 0 <= shard < self.n_shards:
            raise IndexError(f"shard {shard} out of range: the split has {self.n_shards} shards")
        start = shard * self.shard_rows
        return start, min(start + self.shard_rows, self.n_rows)

    def as_attrs(self) -> dict:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_attrs(cls, attrs) -> "SplitLayout":
        if attrs.get("format") != FORMAT:
            raise ValueError(f"not a feature-store split (format={attrs.get('format')!r}, expected {FORMAT!r})")
        return cls(**{k: attrs[k] for k in ("n_rows", "dim", "dtype", "shard_rows", "chunk_rows")})

    @property
    def inner_chunks(self) -> int:
        """Checksummed inner chunks in one features shard file."""
        return self.shard_rows // self.chunk_rows


def arrays_of(attrs) -> tuple[str, ...]:
    """The arrays of a split with attributes ``attrs``: without ``items`` where it was written before them."""
    return ARRAYS if attrs.get(ITEMS_ATTR) else tuple(a for a in ARRAYS if a != "items")


def row_arrays_of(attrs) -> tuple[str, ...]:
    return tuple(a for a in arrays_of(attrs) if a in ROW_ARRAYS)


def default_items(ids) -> np.ndarray:
    """The items of rows written without any (a hand-written store, or one written before items existed): each
    row's id as a public name, ``stores.items.of_name("id:" + id)``. Two such stores with the same ids name the same
    items (a shared budget, never a smaller one); they match no file's content item."""
    from .items import of_name

    return np.array([of_name("id:" + str(i)) for i in np.asarray(ids).tolist()], dtype="U32")


def chunk_key(array: str, shard: int) -> str:
    """Key (relative to the split) of the one file holding ``shard`` of a row array."""
    return f"features/c/{shard}/0" if array == "features" else f"{array}/c/{shard}"


def done_key(shard: int) -> str:
    return f"done/c/{shard}"


def _pow2_floor(x: float) -> int:
    return 1 << max(0, int(np.floor(np.log2(max(x, 1)))))


def choose_layout(n_rows: int, dim: int, dtype: str, shard_rows: int | None = None,
                  chunk_rows: int | None = None) -> SplitLayout:
    """Validate sizes and pick shard/chunk rows (powers of two near the byte targets) when not given."""
    if not (isinstance(n_rows, (int, np.integer)) and n_rows > 0):
        raise ValueError(f"n_rows must be a positive integer, got {n_rows!r}")
    if not (isinstance(dim, (int, np.integer)) and dim > 0):
        raise ValueError(f"dim must be a positive integer, got {dim!r}")
    dtype = np.dtype(dtype).name
    if dtype not in FEATURE_DTYPES:
        raise ValueError(f"features dtype must be one of {FEATURE_DTYPES}, got {dtype!r}")
    row_bytes = dim * np.dtype(dtype).itemsize
    if shard_rows is None:
        shard_rows = min(_pow2_floor(SHARD_TARGET_BYTES / row_bytes), max(1, int(n_rows)))
    if chunk_rows is None:
        chunk_rows = min(_pow2_floor(CHUNK_TARGET_BYTES / row_bytes), shard_rows)
        while shard_rows % chunk_rows:
            chunk_rows //= 2
    if shard_rows <= 0 or chunk_rows <= 0 or shard_rows % chunk_rows:
        raise ValueError(f"shard_rows ({shard_rows}) must be a positive multiple of chunk_rows ({chunk_rows})")
    return SplitLayout(int(n_rows), int(dim), dtype, int(shard_rows), int(chunk_rows))


def array_specs(layout: SplitLayout) -> dict[str, dict]:
    """Keyword arguments for ``zarr.Group.create_array`` of each array in a split."""
    crc = [Crc32cCodec()]
    n, s = layout.n_rows, layout.shard_rows
    by_id = {"coordinates": "ids"}  # CF convention: xarray's zarr backend makes ``ids`` a coordinate of the rows
    return {
        "features": dict(shape=(n, layout.dim), dtype=layout.dtype, shards=(s, layout.dim),
                         chunks=(layout.chunk_rows, layout.dim), compressors=crc, filters=None, fill_value=0,
                         dimension_names=("sample", "feature"), attributes=by_id),
        "labels": dict(shape=(n,), dtype="int64", chunks=(s,), compressors=crc, fill_value=-1,
                       dimension_names=("sample",), attributes=by_id),
        "ids": dict(shape=(n,), dtype=str, chunks=(s,), compressors=crc, dimension_names=("sample",)),
        "items": dict(shape=(n,), dtype=str, chunks=(s,), compressors=crc, dimension_names=("sample",),
                      attributes=by_id),
        "valid": dict(shape=(n,), dtype="bool", chunks=(s,), compressors=crc, fill_value=False,
                      dimension_names=("sample",), attributes=by_id),
        "done": dict(shape=(layout.n_shards,), dtype="bool", chunks=(1,), compressors=crc, fill_value=False,
                     dimension_names=("shard",)),
    }


@functools.lru_cache(maxsize=32)
def expected_documents(layout: SplitLayout) -> dict[str, bytes]:
    """Each array's ``zarr.json`` exactly as :func:`array_specs` creates it for ``layout`` (a pure function)."""
    group = zarr.open_group(zarr.storage.MemoryStore(), mode="w")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not part of the Zarr format 3.*")  # the vlen-utf8 codec
        return {name: _document(group.create_array(name, **spec).metadata)
                for name, spec in array_specs(layout).items()}


def _document(metadata) -> bytes:
    return metadata.to_buffer_dict(default_buffer_prototype())["zarr.json"].to_bytes()


def canonical(doc: dict) -> str:
    return json.dumps(doc, sort_keys=True)


def metadata_json(metadata) -> str:
    """Canonical JSON text of an array's metadata, for comparison with :func:`expected_metadata`."""
    return canonical(json.loads(_document(metadata)))


def expected_metadata(layout: SplitLayout) -> dict[str, str]:
    """Canonical JSON of each array's metadata for ``layout``."""
    return {name: canonical(json.loads(doc)) for name, doc in expected_documents(layout).items()}
