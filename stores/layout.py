"""The on-disk layout of a split: which arrays, their chunking and codecs.

One split = one zarr group holding ``features`` (N, D), ``labels`` (N,), ``ids`` (N,), ``valid`` (N,) and
``done`` (n_shards,). Every array is cut at the same row boundaries (one *shard* = ``shard_rows`` rows), so a
writer that owns a shard owns every byte of it in every array: concurrent writers never share a chunk file.
Every chunk carries a crc32c checksum, so a flipped byte is an error, never data.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from zarr.codecs import Crc32cCodec

FORMAT = "privlin-feature-store/1"
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
    return {
        "features": dict(shape=(n, layout.dim), dtype=layout.dtype, shards=(s, layout.dim),
                         chunks=(layout.chunk_rows, layout.dim), compressors=crc, filters=None, fill_value=0,
                         dimension_names=("sample", "feature")),
        "labels": dict(shape=(n,), dtype="int64", chunks=(s,), compressors=crc, fill_value=-1,
                       dimension_names=("sample",)),
        "ids": dict(shape=(n,), dtype=str, chunks=(s,), compressors=crc, dimension_names=("sample",)),
        "valid": dict(shape=(n,), dtype="bool", chunks=(s,), compressors=crc, fill_value=False,
                      dimension_names=("sample",)),
        "done": dict(shape=(layout.n_shards,), dtype="bool", chunks=(1,), compressors=crc, fill_value=False,
                     dimension_names=("shard",)),
    }
