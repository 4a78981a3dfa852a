"""What the radial coordinate (privlin.radius) costs a streamed fit with the defaults, measured in one run.

    python benchmarks/bench_radius.py [--n 200000] [--d 768] [--k 100] [--steps 2] [--repeats 3]

Both sides are ``privlin.fit`` on the same store path with every default (centering, the scaling stage, ε=8,
δ=1e-5, seeded), streamed (``memory_limit=0``), ``steps`` DP-SGD steps; one side sets ``radial=False``.  The radial
side makes one more pass (the row-norm histogram, shared by every plan of a sweep) and carries one more column
through every other pass.  Median of ``--repeats`` alternated runs after a warm-up (JIT compilation excluded).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from _results import write_section  # noqa: E402
from bench_privlin_speed import build_store  # noqa: E402
from bench_store_read import timed  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "privlin.md"))
    args = p.parse_args(argv)
    import privlin

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "radius.zarr")
        build_store(path, args.n, args.d, args.k)
        kw = dict(epsilon=8.0, classes=range(args.k), steps=args.steps, memory_limit=0, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            on = privlin.fit(path, **kw)
            assert on.plan_.radial and on.plan_.scaled, on.plan_
            wall, cpu = timed({"radial": lambda: privlin.fit(path, **kw),
                               "radial=False": lambda: privlin.fit(path, **kw, radial=False)}, args.repeats)
    ratio = wall["radial"] / wall["radial=False"]
    text = (f"### The radial coordinate's cost (streamed defaults, store {args.n:,} × {args.d} float16, k={args.k}, "
            f"T={args.steps}, ε=8; 2-core CPU; `python benchmarks/bench_radius.py`)\n\n"
            "| fit | wall | CPU |\n|---|---:|---:|\n"
            f"| defaults, radial=False | {wall['radial=False']:.2f} s | {cpu['radial=False']:.2f} s |\n"
            f"| defaults (radial) | {wall['radial']:.2f} s | {cpu['radial']:.2f} s |\n\n"
            f"Radial / not: **{ratio:.2f}×** wall (median of {args.repeats} alternated runs; one more pass for the "
            "histogram, one more column in every other pass).\n")
    write_section(args.out, "bench_radius", text)
    print(text)


if __name__ == "__main__":
    main()
