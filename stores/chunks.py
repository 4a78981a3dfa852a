"""Verified reads of a split's chunk files: every byte handed out matched its crc32c and its shard's manifest.

Features shards bypass zarr's generic pipeline (several copies and an event loop, a fraction of the file's
bandwidth; BENCHMARKS.md). On a local disk each inner chunk arrives with one ``preadv`` straight into the caller's
buffer and is checksummed there; on any other store (fsspec URLs) the shard file is fetched whole (no copy) and each
inner chunk copied out once. The one-chunk-per-shard arrays (labels, ids, valid) are decoded here too, so they are
held to their manifest like the features.

Checksums use the ``crc32c`` package when it is installed (SSE4.2 with interleaved streams, GIL released; faster
than google-crc32c, which zarr's own codec uses: BENCHMARKS.md); otherwise google-crc32c.
Both compute the same Castagnoli CRC.
"""
from __future__ import annotations

import os

import google_crc32c
import numcodecs
import numpy as np

from . import location
from .errors import CorruptStoreError
from .layout import SplitLayout, chunk_key
from .manifest import CRC_BYTES, EMPTY, FileRecord, index_bytes, parse_index

try:
    from crc32c import crc32c as crc32c_value
except ImportError:  # optional: same values, slower
    crc32c_value = google_crc32c.value

_DECODE = {"labels": "<i8", "valid": "?"}
_VLEN = numcodecs.VLenUTF8()


class _LocalFile:
    def __init__(self, path: str):
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size

    def will_read(self, offset: int, n: int) -> None:
        """Start the disk read-ahead of what comes next (a no-op when it is cached)."""
        os.posix_fadvise(self.fd, offset, n, os.POSIX_FADV_WILLNEED)

    def pread(self, n: int, offset: int) -> bytes:
        return os.pread(self.fd, n, offset)

    def readinto(self, buffers: list, offset: int) -> int:
        return os.preadv(self.fd, buffers, offset)

    def close(self) -> None:
        os.close(self.fd)


class _BytesFile:
    def __init__(self, raw):
        self.raw = memoryview(raw).cast("B")
        self.size = len(self.raw)

    def pread(self, n: int, offset: int) -> bytes:
        return self.raw[offset:offset + n]

    def will_read(self, offset: int, n: int) -> None:
        pass

    def readinto(self, buffers: list, offset: int) -> int:
        at = offset
        for b in buffers:
            piece = self.raw[at:at + len(b)]
            memoryview(b).cast("B")[:len(piece)] = piece
            at += len(piece)
        return at - offset

    def close(self) -> None:
        pass


class ShardFiles:
    """Reads the chunk files of one split, checking each against a :class:`~stores.manifest.FileRecord`."""

    def __init__(self, store, split_path: str, split: str, layout: SplitLayout):
        self.store, self.split_path, self.split, self.layout = store, split_path, split, layout
        root = location.local_root(store)
        self.root = None if root is None else os.path.join(root, split_path)
        self.dtype = np.dtype(layout.dtype).newbyteorder("<")
        self.chunk_bytes = layout.chunk_rows * layout.dim * self.dtype.itemsize

    def _corrupt(self, shard: int, array: str, what: str) -> CorruptStoreError:
        return CorruptStoreError(f"split {self.split!r}, shard {shard}, {array} ({chunk_key(array, shard)}): {what}",
                                 split=self.split, shard=shard, array=array)

    def _open(self, shard: int, array: str, record: FileRecord):
        key = chunk_key(array, shard)
        if self.root is not None:
            try:
                f = _LocalFile(os.path.join(self.root, key))
            except FileNotFoundError:
                f = None
        else:
            raw = location.get_buffer(self.store, f"{self.split_path}/{key}")
            f = None if raw is None else _BytesFile(raw)
        if f is None:
            raise self._corrupt(shard, array, "chunk file is missing")
        if f.size != record.size:
            f.close()
            raise self._corrupt(shard, array, f"chunk file has {f.size} bytes, {record.size} when written "
                                              "(truncated, emptied or replaced)")
        return f

    def _check(self, shard, array, data, stored: bytes, expected: int, what: str) -> None:
        stored = int.from_bytes(stored, "little")
        if stored != expected:
            raise self._corrupt(shard, array, f"{what} is not the one written here (checksum differs from the "
                                              "manifest: chunk moved, swapped or rewritten)")
        if crc32c_value(data if isinstance(data, bytes) else np.frombuffer(data, np.uint8)) != stored:
            raise self._corrupt(shard, array, f"checksum of {what} does not match (damaged bytes)")

    def read_small(self, shard: int, array: str, record: FileRecord) -> np.ndarray:
        """The ``shard_rows`` values of ``shard`` in labels, valid, ids or items (rows past N are padding)."""
        f = self._open(shard, array, record)
        try:
            raw = f.pread(f.size, 0)
        finally:
            f.close()
        payload = raw[:-CRC_BYTES]
        self._check(shard, array, payload, raw[-CRC_BYTES:], record.crc32c[0], "the chunk")
        n = self.layout.shard_rows
        if array == "items":
            out = _fixed_text(payload, 32)
        elif array == "ids":
            out = np.array(list(_VLEN.decode(bytes(payload))), dtype=np.dtypes.StringDType())
        else:
            out = np.frombuffer(payload, dtype=_DECODE[array])
        if out.shape != (n,):
            raise self._corrupt(shard, array, f"chunk holds {out.shape[0]} values, not {n}")
        return out

    def read_features(self, shard: int, out: np.ndarray, record: FileRecord, first_row: int = 0) -> None:
        """Fill ``out`` with rows ``[first_row, first_row + len(out))`` of ``shard`` (reads only the inner chunks
        they touch)."""
        lay = self.layout
        f = self._open(shard, "features", record)
        try:
            n_index = index_bytes(lay)
            raw_index = f.pread(n_index, f.size - n_index)
            self._check(shard, "features", raw_index[:-CRC_BYTES], raw_index[-CRC_BYTES:], record.crc32c[-1],
                        "the shard index")
            index = parse_index(raw_index, lay)
            stop_row = first_row + out.shape[0]
            first, last = first_row // lay.chunk_rows, -(-stop_row // lay.chunk_rows)
            f.will_read(int(index[first, 0]), int(index[last - 1, 0] + index[last - 1, 1] - index[first, 0]))
            crc = bytearray(CRC_BYTES)
            for j in range(first, last):
                offset, nbytes = int(index[j, 0]), int(index[j, 1])
                if offset == EMPTY or nbytes != self.chunk_bytes + CRC_BYTES or offset + nbytes > f.size:
                    raise self._corrupt(shard, "features", f"inner chunk {j} has a bad index entry")
                c0 = j * lay.chunk_rows
                a, b = max(c0, first_row), min(c0 + lay.chunk_rows, stop_row)
                whole = a == c0 and b == c0 + lay.chunk_rows
                target = out[a - first_row:b - first_row] if whole else np.empty((lay.chunk_rows, lay.dim), self.dtype)
                view = memoryview(target).cast("B")
                if f.readinto([view, crc], offset) != nbytes:
                    raise self._corrupt(shard, "features", f"inner chunk {j} is cut short")
                self._check(shard, "features", view, bytes(crc), record.crc32c[j], f"inner chunk {j}")
                if not whole:
                    out[a - first_row:b - first_row] = target[a - c0:b - c0]
        finally:
            f.close()


def _fixed_text(payload, width: int) -> np.ndarray:
    """A vlen-utf8 chunk of ASCII texts of ``width`` characters each (row items) as ASCII bytes ``S<width>``, parsed
    with NumPy (the codec builds a list of Python strings, slow for millions of rows); other texts through the codec."""
    raw = np.frombuffer(payload, np.uint8)
    n = int(raw[:4].view("<u4")[0]) if raw.size >= 4 else -1
    if n >= 0 and raw.size == 4 + n * (4 + width):
        rec = raw[4:].reshape(n, 4 + width)
        if (np.ascontiguousarray(rec[:, :4]).view("<u4").ravel() == width).all() and (rec[:, 4:] < 128).all():
            return np.ascontiguousarray(rec[:, 4:]).view(f"S{width}").ravel()
    return np.array([str(v).encode("utf-8", "backslashreplace") for v in _VLEN.decode(bytes(payload))],
                    dtype=f"S{width + 1}")  # a longer or non-ASCII one stays malformed (checked by its reader)
