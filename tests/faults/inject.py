"""Faults to inject into a store on disk, what 'the same store' means after a repair or a rerun, and the one error
line a ``python -m stores`` command prints."""
from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np

import stores

N, D, SHARD, CHUNK = 300, 8, 64, 16  # 5 shards, the last one short; 3 classes of 100 rows in row order
VOLATILE = ("created", "versions", "attrs_sha256")  # differ between any two runs, by design


#: The progress lines ``python -m stores verify`` prints through ``cliconv.status`` once it has run a few seconds (a
#: loaded box): in a log, ``verifying every shard of PATH ...`` when shown and ``verifying every shard of PATH: 2.1 s``
#: at the end.  No other line of the stores command line is progress.
PROGRESS = re.compile(r"verifying every shard of .+(?: \.\.\.|: [0-9]+\.[0-9] s)")


def error_line(text: str) -> str:
    """The one error line of a command's stderr, its progress lines (:data:`PROGRESS`) set aside: fails, showing the
    text, on a traceback or on anything but exactly one other line, so progress never makes a sound error fail."""
    lines = [line for line in text.strip().splitlines() if not PROGRESS.fullmatch(line)]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def rows(n=N, d=D):
    X = np.random.default_rng(0).standard_normal((n, d)).astype(np.float32)
    return X, np.arange(n) // 100, np.array([f"img/{i:04d}.png" for i in range(n)])


def write_store(url, *, finalize=True, shards=None, dtype="float32"):
    """The reference store, or a rerun of the job that writes it (pending shards only)."""
    X, y, ids = rows()
    w = stores.create_split(url, "train", n_rows=N, dim=D, dtype=dtype, shard_rows=SHARD, chunk_rows=CHUNK,
                            attrs={"backbone": "test"}, root_attrs={"dataset": "synthetic", "classes": ["a", "b", "c"]})
    for i in (w.pending() if shards is None else shards):
        a, b = w.shard_bounds(i)
        w.write_shard(i, X[a:b], y[a:b], ids[a:b])
    if finalize:
        w.finalize()
    return w


def flip_bit(path, offset=None, bit=0):
    raw = bytearray(open(path, "rb").read())
    offset = len(raw) // 3 if offset is None else offset
    raw[offset] ^= 1 << bit
    open(path, "wb").write(bytes(raw))


def flip_in_text(path, text: str, index: int, bit: int = 0, occurrence: int = 0):
    """Flip one bit of character ``index`` of the ``occurrence``-th ``text`` in a file."""
    raw = open(path, "rb").read()
    at = -1
    for _ in range(occurrence + 1):
        at = raw.index(text.encode(), at + 1)
    flip_bit(path, at + index, bit)


def truncate(path, size=0):
    with open(path, "r+b") as f:
        f.truncate(size)


def swap(a, b):
    tmp = str(a) + ".swap"
    os.rename(a, tmp)
    os.rename(b, a)
    os.rename(tmp, b)


def copy_over(src, dst):
    shutil.copyfile(src, dst)


def _scrub(doc):
    if isinstance(doc, dict):
        return {k: _scrub(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [_scrub(v) for v in doc]
    return doc


def snapshot(path) -> dict[str, object]:
    """Every file of a store: bytes, or for zarr.json the parsed document without creation time and versions."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            rel = os.path.relpath(p, path)
            out[rel] = _scrub(json.load(open(p))) if f == "zarr.json" else open(p, "rb").read()
    return out


def assert_same_store(a, b):
    sa, sb = snapshot(a), snapshot(b)
    assert sorted(sa) == sorted(sb), (sorted(set(sa) ^ set(sb)))
    for key in sa:
        assert sa[key] == sb[key], f"{key} differs"
