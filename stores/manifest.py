"""Shard manifests: the files a done shard consists of, with sizes and checksums bound to their place.

A chunk's own crc32c says its bytes are intact, not that they are the right bytes in the right place: zarr
reads a deleted chunk as the fill value (zeros, label -1, dropped rows) and a chunk file copied over another
passes. So when a shard is marked done, its writer records, for each of the shard's chunk files, the key, the
size and the crc32c values stored in the file (one per checksummed unit, in file order: every inner chunk of a
features shard, then its index; the single chunk of the other arrays). Readers and ``verify`` compare each file
with its record. The manifest also carries the split's layout, so damaged split metadata disagrees with it, and
the sha256 of its own JSON.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
from zarr.abc.store import RangeByteRequest, SuffixByteRequest

from . import location
from .errors import CorruptStoreError
from .layout import SplitLayout, chunk_key

FORMAT = "privlin-shard-manifest/1"
CRC_BYTES = 4
EMPTY = 2**64 - 1  # shard-index entry of an inner chunk that was not written


def manifest_key(shard: int) -> str:
    """Key (relative to the split) of shard ``shard``'s manifest."""
    return f"manifests/{shard}"


@dataclass(frozen=True)
class FileRecord:
    """What one chunk file held when its shard was marked done."""

    size: int
    crc32c: tuple[int, ...]


@dataclass(frozen=True)
class Manifest:
    shard: int
    files: dict  # array name -> FileRecord


def index_bytes(layout: SplitLayout) -> int:
    """Size of a features shard's index: (offset, nbytes) per inner chunk, then its crc32c."""
    return 16 * layout.inner_chunks + CRC_BYTES


def parse_index(raw: bytes, layout: SplitLayout) -> np.ndarray:
    return np.frombuffer(raw[:-CRC_BYTES], dtype="<u8").reshape(layout.inner_chunks, 2)


def _crc(raw: bytes) -> int:
    return int.from_bytes(raw[-CRC_BYTES:], "little")


def _record(store, split_path: str, array: str, shard: int, layout: SplitLayout) -> FileRecord:
    """Read back the checksums a freshly written chunk file stores (small range reads, not the whole file)."""
    key = f"{split_path}/{chunk_key(array, shard)}"
    if array != "features":
        raw = location.get_bytes(store, key)
        if raw is None:
            raise FileNotFoundError(f"chunk {key!r} was not written")
        return FileRecord(len(raw), (_crc(raw),))
    raw_index = location.get_bytes(store, key, SuffixByteRequest(index_bytes(layout)))
    if raw_index is None:
        raise FileNotFoundError(f"chunk {key!r} was not written")
    index = parse_index(raw_index, layout)
    start, stop = layout.shard_bounds(shard)
    used = -(-(stop - start) // layout.chunk_rows)  # inner chunks past the last row of the split do not exist
    if (index[:used, 0] == EMPTY).any():  # the writer stores every other inner chunk (write_empty_chunks)
        raise RuntimeError(f"{key!r} has inner chunks that were not written")
    ends = [int(o) + int(n) for o, n in index[:used]]
    crcs = location.get_many(store, [key] * used, [RangeByteRequest(e - CRC_BYTES, e) for e in ends])
    return FileRecord(location.get_size(store, key),
                      tuple(_crc(c) for c in crcs) + (None,) * (layout.inner_chunks - used) + (_crc(raw_index),))


def build(store, split_path: str, split: str, shard: int, layout: SplitLayout, *, arrays) -> bytes:
    """The manifest of a written shard (its row ``arrays``), as the bytes to store under :func:`manifest_key`."""
    files = {a: _record(store, split_path, a, shard, layout) for a in arrays}
    body = {"format": FORMAT, "split": split, "shard": shard, "rows": list(layout.shard_bounds(shard)),
            "layout": layout.as_attrs(),
            "files": {a: {"key": chunk_key(a, shard), "size": r.size, "crc32c": list(r.crc32c)}
                      for a, r in files.items()}}
    return _with_digest(body)


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _with_digest(body: dict) -> bytes:
    return json.dumps({**body, "sha256": _digest(body)}, sort_keys=True, indent=1).encode()


def load(raw: bytes | None, split: str, shard: int, layout: SplitLayout, *, arrays) -> Manifest:
    """Parse and check a stored manifest listing the row ``arrays``; :class:`CorruptStoreError` naming the shard
    when anything is off."""
    where = f"split {split!r}, shard {shard}"

    def bad(what):
        return CorruptStoreError(f"{where}: {what}", split=split, shard=shard, array="manifest")

    if raw is None:
        raise bad(f"marked done but its manifest ({manifest_key(shard)}) is missing")
    try:
        doc = json.loads(raw)
        body = {k: v for k, v in doc.items() if k != "sha256"}
        digest = doc["sha256"]
    except (ValueError, TypeError, KeyError, AttributeError):
        raise bad(f"manifest ({manifest_key(shard)}) is not readable JSON") from None
    if digest != _digest(body):
        raise bad(f"manifest ({manifest_key(shard)}) fails its checksum")
    if body.get("format") != FORMAT or body.get("split") != split or body.get("shard") != shard:
        raise bad(f"manifest ({manifest_key(shard)}) belongs to split {body.get('split')!r}, "
                  f"shard {body.get('shard')} (moved or copied)")
    if body.get("layout") != layout.as_attrs() or body.get("rows") != list(layout.shard_bounds(shard)):
        diff = {k: (v, body.get("layout", {}).get(k)) for k, v in layout.as_attrs().items()
                if body.get("layout", {}).get(k) != v}
        raise bad("split metadata disagrees with the shard manifest (metadata damaged): "
                  + ", ".join(f"{k} is {a!r} in zarr.json, {b!r} when written" for k, (a, b) in diff.items()))
    try:
        files = {a: FileRecord(int(f["size"]), tuple(None if c is None else int(c) for c in f["crc32c"]))
                 for a, f in body["files"].items()}
    except (KeyError, TypeError, ValueError):
        raise bad(f"manifest ({manifest_key(shard)}) lacks file records") from None
    if set(files) != set(arrays):
        raise bad(f"manifest ({manifest_key(shard)}) lists arrays {sorted(files)}, not {sorted(arrays)}")
    return Manifest(shard, files)
