"""Read bandwidth of ``Split.blocks()`` vs reading the same bytes as raw files, in one run.

    python benchmarks/bench_store_read.py [--rows 200000] [--dim 768] [--repeats 5]

Both readers see a warm page cache (each is run once before timing, then alternated), so the ratio measures the
store's own overhead (zarr decoding, crc32c checks, copies), not the disk.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import stores  # noqa: E402


def build(path, n, d):
    rng = np.random.default_rng(0)
    w = stores.create_split(path, "train", n_rows=n, dim=d, dtype="float16")
    for i in w.pending():
        a, b = w.shard_bounds(i)
        w.write_shard(i, rng.standard_normal((b - a, d), dtype=np.float32), np.zeros(b - a, int),
                      np.arange(a, b).astype(str))
    w.finalize()
    return w.layout


def read_raw(path) -> int:
    total = 0
    root = os.path.join(path, "train", "features", "c")
    for dirpath, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(dirpath, f), "rb") as fh:
                total += len(fh.read())
    return total


def read_blocks(path, rows) -> int:
    total = 0
    for X, _ in stores.open(path)["train"].blocks(rows=rows):
        total += X.nbytes
    return total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--block-rows", type=int, default=65536)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.zarr")
        layout = build(path, args.rows, args.dim)
        read_raw(path), read_blocks(path, args.block_rows)  # warm the page cache for both
        raw_t, blk_t = [], []
        for _ in range(args.repeats):
            t = time.perf_counter(); nraw = read_raw(path); raw_t.append(time.perf_counter() - t)
            t = time.perf_counter(); nblk = read_blocks(path, args.block_rows); blk_t.append(time.perf_counter() - t)
        raw, blk = np.median(raw_t), np.median(blk_t)
        gb = nblk / 1e9
        print(f"split {args.rows} x {args.dim} float16 ({gb:.2f} GB of features; {nraw / 1e9:.2f} GB of files), "
              f"shard_rows={layout.shard_rows}, chunk_rows={layout.chunk_rows}, blocks(rows={args.block_rows})")
        print(f"raw files: {gb / raw:.2f} GB/s   blocks(): {gb / blk:.2f} GB/s   "
              f"blocks/raw bandwidth = {raw / blk:.2f}  (median of {args.repeats}, {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
