"""Store bandwidth in one run: ``Split.blocks()`` vs raw reads of the same files, and shard writes, each against
the store as it was before the integrity work (``--before`` commit, imported from git) on the same data.

    python benchmarks/bench_store_read.py [--rows 200000] [--dim 768] [--repeats 5] [--before 0f5a942]

Read rows, every one a median of ``--repeats`` alternated runs:

* raw, old definition: ``open().read()`` of every features shard file, one thread (the baseline of the first
  rows in BENCHMARKS.md, kept for comparison);
* raw, parallel into place: ``preadv`` of every shard file into one preallocated buffer with the reader's
  threads, no checks (what the hardware and the page cache give this access pattern);
* ``blocks()`` before (format /1, chunk checksums only) and now (manifests and metadata seals too);
* warm page cache, then cold (``posix_fadvise(DONTNEED)`` on every file before each run: works unprivileged for
  files one may read, so no store larger than RAM is needed to read from the disk), then through fsspec
  (local files behind ``FsspecStore``, raw = ``fs.cat_file``).

Write rows: shards written by ``write_shard`` (float16, same rows) before, now, and now without fsync, so the
cost of the manifest and of the fsyncs shows separately.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import stores  # noqa: E402
from stores import buffers, location  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from _results import write_section  # noqa: E402


def load_before(commit: str, tmp: str):
    """The ``stores`` package at ``commit``, importable as ``stores_before``."""
    folder = os.path.join(tmp, "before", "stores_before")
    os.makedirs(folder)
    names = subprocess.run(["git", "-C", ROOT, "ls-tree", "--name-only", commit, "stores/"], check=True,
                           capture_output=True, text=True).stdout.split()
    for name in names:
        if name.endswith(".py"):
            src = subprocess.run(["git", "-C", ROOT, "show", f"{commit}:{name}"], check=True, capture_output=True,
                                 text=True).stdout
            open(os.path.join(folder, os.path.basename(name)), "w").write(src)
    sys.path.insert(0, os.path.dirname(folder))
    return importlib.import_module("stores_before")


def data(n, d, shard):
    rng = np.random.default_rng(0)
    for a in range(0, n, shard):
        b = min(a + shard, n)
        yield a, b, rng.standard_normal((b - a, d), dtype=np.float32).astype(np.float16)


def write(module, path, n, d) -> float:
    """Seconds to create a split and write every shard (float16 rows prepared beforehand)."""
    layout = stores.layout.choose_layout(n, d, "float16")
    rows = list(data(n, d, layout.shard_rows))
    t = time.perf_counter()
    w = module.create_split(path, "train", n_rows=n, dim=d, dtype="float16")
    for i, (a, b, X) in enumerate(rows):
        w.write_shard(i, X, np.zeros(b - a, int), np.arange(a, b).astype(str))
    w.finalize()
    return time.perf_counter() - t


def shard_files(path):
    root = os.path.join(path, "train", "features", "c")
    return sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs)


def drop_cache(path):
    for dp, _, fs in os.walk(path):
        for f in fs:
            fd = os.open(os.path.join(dp, f), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def raw_read(path) -> int:
    total = 0
    for p in shard_files(path):
        with open(p, "rb") as fh:
            total += len(fh.read())
    return total


class RawInto:
    """Every shard file preadv'ed into one preallocated buffer by the reader's thread count."""

    def __init__(self, path):
        self.files = shard_files(path)
        self.sizes = [os.path.getsize(p) for p in self.files]
        self.buf = np.empty(sum(self.sizes), np.uint8)
        self.pool = ThreadPoolExecutor(buffers.io_pool()._max_workers)

    def __call__(self, _path=None) -> int:
        offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])

        def one(i):
            fd = os.open(self.files[i], os.O_RDONLY)
            try:
                return os.preadv(fd, [memoryview(self.buf[offsets[i]:offsets[i] + self.sizes[i]])], 0)
            finally:
                os.close(fd)
        return sum(self.pool.map(one, range(len(self.files))))


def blocks(module, url, rows=65536, keep=False, split=None) -> int:
    """One pass of ``blocks()``: over a freshly opened split (open included), or over ``split`` again."""
    total, kept = 0, []
    for X, _ in (split or module.open(url)["train"]).blocks(rows=rows):
        total += X.nbytes
        if keep:
            kept.append(X)  # a caller that keeps every block: no buffer can be reused
    return total


def timed(runs: dict, repeats: int, before_each=None) -> tuple[dict, dict]:
    """Median wall and CPU seconds (this process, all threads) of each callable, alternated; the first
    (warm-up) run is not counted. On a shared machine wall time includes waiting for a core; CPU time does not."""
    wall, cpu = {k: [] for k in runs}, {k: [] for k in runs}
    for r in range(repeats + 1):
        for k, fn in runs.items():
            if before_each:
                before_each()
            t, c = time.perf_counter(), time.process_time()
            fn()
            if r:
                wall[k].append(time.perf_counter() - t)
                cpu[k].append(time.process_time() - c)
    return ({k: float(np.median(v)) for k, v in wall.items()}, {k: float(np.median(v)) for k, v in cpu.items()})


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--block-rows", type=int, default=65536)
    p.add_argument("--before", default="0f5a942", help="commit of the store before manifests and seals")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "stores.md"))
    args = p.parse_args()
    n, d = args.rows, args.dim
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:  # on the disk, not a tmpfs: fsync and cold reads are real
        before = load_before(args.before, tmp)
        old, new = os.path.join(tmp, "before.zarr"), os.path.join(tmp, "now.zarr")
        # ---- writes
        real_fsync = location.fsync_keys
        wt = {"before": [], "now": [], "now without fsync": []}
        for r in range(max(2, args.repeats // 2)):
            for name in wt:
                path = os.path.join(tmp, f"w{r}{name.replace(' ', '_')}.zarr")
                location.fsync_keys = (lambda *a, **k: None) if name.endswith("fsync") else real_fsync
                wt[name].append(write(before if name == "before" else stores, path, n, d))
        location.fsync_keys = real_fsync
        wt = {k: float(np.median(v)) for k, v in wt.items()}
        write(before, old, n, d)
        write(stores, new, n, d)
        gb = n * d * 2 / 1e9
        layout = stores.open(new)["train"].layout
        raw_into = RawInto(new)
        one_split = stores.open(new)["train"]
        read_runs = {"raw (old definition)": lambda: raw_read(new), "raw parallel into place": raw_into,
                     "blocks() before": lambda: blocks(before, old, args.block_rows),
                     "blocks() now": lambda: blocks(stores, new, args.block_rows),
                     "blocks() now, passes over one open split": lambda: blocks(stores, new, args.block_rows,
                                                                                 split=one_split),
                     "blocks() now, caller keeps every block": lambda: blocks(stores, new, args.block_rows, True)}
        warm = timed(read_runs, args.repeats)
        cold_runs = {k: v for k, v in read_runs.items() if "keeps" not in k}
        cold = timed(cold_runs, max(2, args.repeats // 2), before_each=lambda: (drop_cache(old), drop_cache(new)))
        import fsspec
        import zarr.storage
        from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
        fs = fsspec.filesystem("file")
        with warnings.catch_warnings():  # zarr notes the wrapped file system is synchronous: that is the point
            warnings.simplefilter("ignore")
            fstore = zarr.storage.FsspecStore(AsyncFileSystemWrapper(fs), path=new, read_only=True)
            ostore = zarr.storage.FsspecStore(AsyncFileSystemWrapper(fs), path=old, read_only=True)
        fs_runs = {"raw fs.cat_file (fsspec)": lambda: sum(len(fs.cat_file(f)) for f in shard_files(new)),
                   "blocks() before, fsspec": lambda: blocks(before, ostore, args.block_rows),
                   "blocks() now, fsspec": lambda: blocks(stores, fstore, args.block_rows)}
        through = timed(fs_runs, args.repeats)
    load = os.getloadavg()[0]
    lines = [
        "## stores: read and write bandwidth against raw files and the store before manifests (one run)",
        "",
        f"Measured {datetime.date.today()} on {platform.machine()}, {os.cpu_count()} CPUs (shared; load average "
        f"{load:.1f} at the end), `python benchmarks/bench_store_read.py --rows {n} --dim {d} --repeats "
        f"{args.repeats}`: float16 split of {n:,} x {d} ({gb:.2f} GB of features), shards of {layout.shard_rows} "
        f"rows, chunks of {layout.chunk_rows} rows, `blocks(rows={args.block_rows})`, {buffers.io_pool()._max_workers} "
        "reading threads; medians of alternated runs. *before* = the store at commit "
        f"`{args.before}` (chunk crc32c only); *now* = manifests + sealed metadata + fsync, every checksum still "
        "verified on every read. Through fsspec both ratio columns are against `fs.cat_file` of the same files. "
        "Goal: blocks() >= 0.80 of raw read bandwidth.",
        "",
        "| read | page cache | GB/s | / raw (old definition) | / raw parallel into place | now / before "
        "| CPU s per GB | raw parallel / this, CPU time |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    raws = ("raw (old definition)", "raw parallel into place")
    for label, (res, cpu) in (("warm", warm), ("cold (fadvise DONTNEED)", cold), ("warm, through fsspec", through)):
        base = raws if label != "warm, through fsspec" else ("raw fs.cat_file (fsspec)",) * 2
        before = next(k for k in res if k.startswith("blocks() before"))
        for k, secs in res.items():
            now_vs_before = f"{res[before] / secs:.2f}" if k.startswith("blocks() now") else ""
            lines.append(f"| {k} | {label} | {gb / secs:.2f} | {res[base[0]] / secs:.2f} | {res[base[1]] / secs:.2f} "
                         f"| {now_vs_before} | {cpu[k] / gb:.2f} | {cpu[base[1]] / cpu[k]:.2f} |")
    lines += ["", "| write (create + every write_shard + finalize) | GB/s of features | now / before |",
              "|---|---:|---:|"]
    for k, secs in wt.items():
        lines.append(f"| {k} | {gb / secs:.2f} | {wt['before'] / secs:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    write_section(args.out, "bench_store_read", text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
