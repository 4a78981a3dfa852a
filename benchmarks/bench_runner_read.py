"""privlin's streamed fits against the read of the store they stream (issue 19), every number from one run.

    python benchmarks/bench_runner_read.py [--n 200000] [--d 768] [--k 100] [--cold] [--repeats 5]

Baselines (the floor a one-pass fit can reach):

* **raw file read**: every features shard file ``preadv``'ed into one preallocated buffer by the reader's threads,
  no checks (what the disk or the page cache gives this access pattern);
* **``blocks()``**: iterating ``Split.blocks()`` without conversion (float16 as stored, every chunk checksum and
  manifest verified) — the read a fit cannot avoid.

Fits (``privlin.fit`` on the store path, ε=1, δ=1e-5, seeded so both sides of a repeat do the same work):
``adam1`` streamed (``memory_limit=0``), ``adam1`` with private centering streamed, ``adam1`` in memory (the load
included), DP-SGD ``T=2`` streamed (reported per step: one streamed pass each).  Each row is the median of
``--repeats`` alternated runs after one warm-up (JIT compilation excluded); ``--cold`` drops every store file from
the page cache (``posix_fadvise(DONTNEED)``) before each run, so the store is read from the disk.

On a CUDA device the runner reads blocks into page-locked host memory (``privlin.rows.PAGE_LOCKED``); there the
``blocks() → device`` and ``adam1 streamed`` rows are also run with ordinary (pageable) buffers, in the same
alternation, and the two routes' seeded fits must give bit-identical weights (the DMA must not race the reader).

``--reuse PATH`` keeps the store at PATH between runs (made if absent).  Stores larger than a few GB are made from
one random block of rows rotated per shard (the values do not change the work).  JAX picks its default device
(``JAX_PLATFORMS=cpu`` to force the CPU); the device is named in the output.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import numpy as np  # noqa: E402

import stores  # noqa: E402
from _results import write_section  # noqa: E402
from bench_privlin_speed import build_store  # noqa: E402
from bench_store_read import RawInto, drop_cache, timed  # noqa: E402

FITS = {  # name -> privlin.fit keywords; passes: streamed passes over the store the fit makes
    "adam1 streamed": (dict(method="adam1", center=False, memory_limit=0), 1),
    "adam1 + centering, streamed": (dict(method="adam1", center=True, memory_limit=0), 2),
    "adam1 in memory (load included)": (dict(method="adam1", center=False, memory_limit=2**40), 1),
    "sgd T=2 streamed": (dict(method="sgd", steps=2, center=False, scale=False, memory_limit=0), 2),
}
GOALS = {"adam1 streamed": "≤ 2×", "adam1 + centering, streamed": "≤ 3.5×", "sgd T=2 streamed": "≤ 2.5× per step",
         "blocks()": "≥ 0.8 of raw bandwidth"}


def patched(fn, obj, name, value):
    """``fn`` run with ``obj.name`` set to ``value`` (restored after): a variant of a run, in the same process."""
    def run():
        old = getattr(obj, name)
        setattr(obj, name, value)
        try:
            return fn()
        finally:
            setattr(obj, name, old)
    return run


def device_name() -> str:
    import jax
    dev = jax.devices()[0]
    return f"{dev.platform}: {getattr(dev, 'device_kind', dev)}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cold", action="store_true", help="drop the store from the page cache before every run")
    p.add_argument("--fits", nargs="+", default=list(FITS), choices=list(FITS))
    p.add_argument("--block-rows", type=int, default=65536)
    p.add_argument("--reuse", default=None, help="store path kept between runs (made if absent)")
    p.add_argument("--tag", default=None, help="results section name (default from the sizes and device)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "runner_read.md"))
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    import privlin
    from privlin import rows as runner_rows  # the runner's page-locked path and host-to-device copy

    tmp = None if args.reuse else tempfile.mkdtemp(dir=os.environ.get("BENCH_TMP"))
    path = args.reuse or os.path.join(tmp, "bench.zarr")
    try:
        if not os.path.exists(path):
            t = time.perf_counter()
            build_store(path, args.n, args.d, args.k)
            print(f"store made in {time.perf_counter() - t:.1f} s", flush=True)
        split = stores.open(path)["train"]
        nbytes = sum(os.path.getsize(f) for f in RawInto(path).files)
        raw = RawInto(path)

        def read_blocks():
            for X, _ in split.blocks(rows=args.block_rows):
                pass

        def blocks_to_device():  # the read plus the host-to-device copy a fit cannot avoid (the runner's), no compute
            import jax
            locked = runner_rows.page_locked()
            last = None
            for X, _ in split.blocks(rows=args.block_rows, page_locked=locked):
                last = runner_rows.put_rows(X)
                if locked:
                    jax.block_until_ready(last)
            jax.block_until_ready(last)

        def fit(kw):
            return privlin.fit(path, epsilon=1.0, delta=1e-5, classes=range(args.k), random_state=0,
                               block_rows=args.block_rows, **kw)

        def pageable(fn):  # the same run through ordinary host buffers
            return patched(fn, runner_rows, "PAGE_LOCKED", False)

        runs = {"raw file read": lambda: raw(), "blocks()": read_blocks, "blocks() → device": blocks_to_device}
        both = runner_rows.page_locked()
        if both:
            runs["blocks() → device, pageable"] = pageable(blocks_to_device)
        for name in args.fits:
            kw, _ = FITS[name]
            runs[name] = lambda kw=kw: fit(kw)
            if both and name == "adam1 streamed":
                runs[name + ", pageable"] = pageable(lambda kw=kw: fit(kw))
                a, b = fit(kw), pageable(lambda kw=kw: fit(kw))()
                same = (np.array_equal(a.coef_transformed_, b.coef_transformed_)
                        and np.array_equal(a.intercept_transformed_, b.intercept_transformed_))
                print(f"page-locked and pageable seeded fits bit-identical: {same}", flush=True)
                if not same:
                    raise SystemExit("page-locked route changed the fit")
        wall, _ = timed(runs, args.repeats, before_each=(lambda: drop_cache(path)) if args.cold else None)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    dev = device_name()
    cache = "cold page cache (posix_fadvise DONTNEED before each run)" if args.cold else "warm page cache"
    machine = f"{os.cpu_count()}-CPU {platform.machine()}, JAX device {dev}"
    gb = nbytes / 1e9
    lines = [f"### privlin against the read: {args.n:,} × {args.d} float16, k={args.k}, {cache} "
             f"({datetime.date.today()}, {machine})", "",
             f"`python benchmarks/bench_runner_read.py --n {args.n} --d {args.d} --k {args.k}"
             f"{' --cold' if args.cold else ''}`: median of {args.repeats} alternated runs after a warm-up; "
             f"store {gb:.2f} GB of feature files.", "",
             "| what | seconds | GB/s | / raw file read | / `blocks()` read | goal (issue 19) |",
             "|---|---:|---:|---:|---:|---|"]
    raw_s, blocks_s = wall["raw file read"], wall["blocks()"]
    for name, s in wall.items():
        passes = FITS.get(name.removesuffix(", pageable"), (None, 1))[1]
        per = " per step" if name.startswith("sgd") else ""
        div = 2 if name.startswith("sgd") else 1  # T=2: two streamed passes, reported per step
        lines.append(f"| {name} | {s:.3f} | {gb * passes / s:.2f} | {s / div / raw_s:.2f}×{per} | "
                     f"{s / div / blocks_s:.2f}×{per} | {GOALS.get(name, '')} |")
    lines.append("")
    lines.append(f"`blocks()` reads at **{raw_s / blocks_s:.2f}** of the raw file bandwidth.")
    text = "\n".join(lines)
    print(text)
    print("RESULT" + json.dumps({"wall": wall, "bytes": nbytes, "device": dev}))
    tag = args.tag or f"runner_read n={args.n} d={args.d} k={args.k}{' cold' if args.cold else ''} {dev}"
    write_section(args.out, tag, text)


if __name__ == "__main__":
    main()
