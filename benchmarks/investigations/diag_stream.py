"""Where a streamed fit's time goes on a large store (issue 19): read, host-to-device copy plus compute, fixed cost.

    python benchmarks/investigations/diag_stream.py [--n 98304] [--d 36864] [--k 1000] [--repeats 3] [--profile]

Rows, each the median of ``--repeats`` alternated runs after a warm-up, warm page cache: ``blocks()`` as the runner
reads it (page-locked where the device is a GPU) with the reader's thread count and with one thread per CPU;
``adam1`` streamed as shipped; the same fit fed from blocks already in memory (copy + compute, no read); the same
fit with one reading thread per CPU; and the fit on one block of the store (the fixed cost: plan, accounting,
compile-cache lookups, ledger, the copy of the weights to the host).  ``--profile`` then profiles the one-block
fit once (cProfile, top functions by cumulative and own time; a host wait on the device shows as ``numpy.asarray``).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]  # privlin, stores; the bench_* helpers it reuses
import stores  # noqa: E402
from stores import buffers  # noqa: E402
from privlin import data, rows as runner_rows  # noqa: E402
from bench_privlin_speed import build_store  # noqa: E402
from bench_store_read import timed  # noqa: E402
from bench_runner_read import device_name, patched  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=98304)
    p.add_argument("--d", type=int, default=36864)
    p.add_argument("--k", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="then profile the one-block fit")
    p.add_argument("--read-variants", action="store_true",
                   help="also blocks() without the read-ahead hint, with 4 and 12 threads, and with checksums skipped "
                        "(a bound, never shipped)")
    a = p.parse_args()
    warnings.simplefilter("ignore")
    import privlin

    tmp = tempfile.mkdtemp(dir=os.environ.get("BENCH_TMP"))
    try:
        path, small = os.path.join(tmp, "big.zarr"), os.path.join(tmp, "one_block.zarr")
        build_store(path, a.n, a.d, a.k)
        rows = runner_rows.stream_block_rows(65536, a.d * 2)
        build_store(small, rows, a.d, a.k)
        split = stores.open(path)["train"]
        locked = runner_rows.page_locked()
        kw = dict(epsilon=1.0, delta=1e-5, classes=range(a.k), random_state=0, method="adam1", center=False,
                  memory_limit=0)
        default_pool, wide_pool = buffers.io_pool(), ThreadPoolExecutor(os.cpu_count())

        def with_pool(pool, fn):  # the reader's threads replaced by ``pool``
            return patched(fn, buffers, "_POOL", pool)

        def read():
            for X, _ in split.blocks(rows=rows, page_locked=locked):
                pass

        held = [(X.copy(), y.copy()) for X, y in split.blocks(rows=rows)]
        if locked:
            pinned = []
            for X, y in held:
                buf = buffers.page_locked(X.nbytes)[:X.nbytes].view(X.dtype).reshape(X.shape)
                buf[...] = X
                pinned.append((buf, y))
            held = pinned
        original = data.SplitSource.blocks

        def from_memory():
            data.SplitSource.blocks = lambda self, rows, page_locked=False: iter(held)
            try:
                privlin.fit(path, **kw)
            finally:
                data.SplitSource.blocks = original

        runs = {"blocks()": read, f"blocks(), {os.cpu_count()} threads": with_pool(wide_pool, read),
                "adam1 streamed": lambda: privlin.fit(path, **kw), "adam1 from blocks in memory": from_memory,
                f"adam1 streamed, {os.cpu_count()} threads": with_pool(wide_pool, lambda: privlin.fit(path, **kw)),
                "adam1 on one block (fixed cost)": lambda: privlin.fit(small, **kw)}
        if a.read_variants:
            from stores import chunks
            file_cls = chunks._LocalFile

            runs["blocks(), no WILLNEED hint"] = patched(read, file_cls, "will_read", lambda self, o, n: None)
            runs["blocks(), 4 threads"] = with_pool(ThreadPoolExecutor(4), read)
            runs["blocks(), 12 threads"] = with_pool(ThreadPoolExecutor(12), read)
            deeper = lambda blocks, depth=1: ahead(blocks, depth=3)  # noqa: E731
            ahead = runner_rows.read_ahead
            fit = lambda: privlin.fit(path, **kw)  # noqa: E731
            runs["adam1 streamed, read-ahead 3 blocks"] = patched(patched(fit, buffers.Recycler, "KEEP", 6),
                                                                  runner_rows, "read_ahead", deeper)
            runs["blocks(), checksums skipped (bound)"] = patched(read, chunks.ShardFiles, "_check",
                                                                  lambda self, *args: None)
        wall, cpu = timed(runs, a.repeats)
        if a.profile:
            prof = cProfile.Profile()
            prof.runcall(privlin.fit, small, **kw)
            st = pstats.Stats(prof)
            st.sort_stats("cumulative").print_stats(30)
            st.sort_stats("tottime").print_stats(15)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{a.n:,} x {a.d} float16, k={a.k}, block {rows} rows, page-locked {locked}, {device_name()}, "
          f"{os.cpu_count()} CPUs, reader threads {default_pool._max_workers}")
    for name, s in wall.items():
        print(f"{name:40s} {s:8.3f} s wall {cpu[name]:8.3f} s CPU  {s / wall['blocks()']:5.2f}x blocks()")


if __name__ == "__main__":
    main()
