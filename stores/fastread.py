"""Fast path for the hot loop: whole feature shards read from local files straight into the caller's buffer.

zarr's generic pipeline decodes a sharded array through several copies and an event loop (about 0.1 of raw file
bandwidth on a 2-core machine, see BENCHMARKS.md). For the exact layout this package writes (zarr v3 sharding,
inner codecs ``bytes`` + ``crc32c``, index ``bytes`` + ``crc32c`` at the end) on a local disk, this module reads
each inner chunk with one ``preadv`` into its final place and checks its crc32c there: one copy, every checksum
still verified. Any other store or layout uses zarr's own path (:func:`supported` says which).
"""
from __future__ import annotations

import os

import google_crc32c
import numpy as np
import zarr.storage
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

from .errors import CorruptStoreError
from .layout import SplitLayout

EMPTY = np.uint64(2**64 - 1)  # index entry of an inner chunk zarr did not write (all fill value)


def supported(array) -> bool:
    """True when ``array`` is a features array on a local disk with the codec layout :mod:`stores.layout` writes."""
    if not isinstance(array.store, zarr.storage.LocalStore):
        return False
    codecs = array.metadata.codecs
    if len(codecs) != 1 or not isinstance(codecs[0], ShardingCodec):
        return False
    sc = codecs[0]
    little = lambda c: isinstance(c, BytesCodec) and (c.endian is None or c.endian.value == "little")  # noqa: E731
    return (len(sc.codecs) == 2 and little(sc.codecs[0]) and isinstance(sc.codecs[1], Crc32cCodec)
            and len(sc.index_codecs) == 2 and little(sc.index_codecs[0])
            and isinstance(sc.index_codecs[1], Crc32cCodec) and sc.index_location.value == "end")


def _crc_ok(data, stored: bytes) -> bool:
    return google_crc32c.value(data) == int.from_bytes(stored, "little")


class LocalShardReader:
    """Reads whole shards of a features array; raises :class:`CorruptStoreError` on any checksum mismatch."""

    def __init__(self, array, layout: SplitLayout, split: str):
        self.layout, self.split = layout, split
        self.root = os.path.join(str(array.store.root), array.path)
        self.dtype = np.dtype(layout.dtype).newbyteorder("<")
        self.n_inner = layout.shard_rows // layout.chunk_rows
        self.chunk_bytes = layout.chunk_rows * layout.dim * self.dtype.itemsize

    def _corrupt(self, shard, what):
        return CorruptStoreError(f"split {self.split!r}, shard {shard}, array 'features': {what}",
                                 split=self.split, shard=shard, array="features")

    def read_into(self, shard: int, out: np.ndarray) -> None:
        """Fill ``out`` (rows of ``shard``, D), C-contiguous, with the shard's features."""
        path = os.path.join(self.root, "c", str(shard), "0")
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            out[...] = 0  # zarr writes no file for an all-fill shard
            return
        try:
            size = os.fstat(fd).st_size
            index_size = 16 * self.n_inner + 4
            if size < index_size:
                raise self._corrupt(shard, f"shard file of {size} bytes is shorter than its index")
            raw_index = os.pread(fd, index_size, size - index_size)
            if not _crc_ok(raw_index[:-4], raw_index[-4:]):
                raise self._corrupt(shard, "shard index checksum does not match")
            index = np.frombuffer(raw_index[:-4], dtype="<u8").reshape(self.n_inner, 2)
            rows, crc = out.shape[0], bytearray(4)
            for j in range(-(-rows // self.layout.chunk_rows)):
                offset, nbytes = index[j]
                r0, r1 = j * self.layout.chunk_rows, min((j + 1) * self.layout.chunk_rows, rows)
                if offset == EMPTY:
                    out[r0:r1] = 0
                    continue
                if nbytes != self.chunk_bytes + 4 or offset + nbytes > size:
                    raise self._corrupt(shard, f"inner chunk {j} has a bad index entry")
                full = r1 - r0 == self.layout.chunk_rows
                target = out[r0:r1] if full else np.empty((self.layout.chunk_rows, self.layout.dim), self.dtype)
                got = os.preadv(fd, [memoryview(target).cast("B"), crc], int(offset))
                if got != nbytes or not _crc_ok(target.reshape(-1).view(np.uint8), bytes(crc)):
                    raise self._corrupt(shard, f"checksum of inner chunk {j} does not match")
                if not full:
                    out[r0:r1] = target[: r1 - r0]
        finally:
            os.close(fd)
