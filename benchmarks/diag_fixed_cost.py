"""What a one-block streamed fit spends outside the pass (issue 19: the fixed cost grows with d·k).

    python benchmarks/diag_fixed_cost.py [--d 36864] [--k 1000]

A store of one streamed block; the fit timed (median of 3 after a warm-up), then profiled once (cProfile, top
functions by cumulative and by own time; a host wait on the device shows as ``numpy.asarray``).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from privlin import runner  # noqa: E402
from bench_privlin_speed import build_store  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--d", type=int, default=36864)
    p.add_argument("--k", type=int, default=1000)
    p.add_argument("--method", default="adam1")
    a = p.parse_args()
    warnings.simplefilter("ignore")
    import privlin

    tmp = tempfile.mkdtemp(dir=os.environ.get("BENCH_TMP"))
    try:
        path = os.path.join(tmp, "one_block.zarr")
        build_store(path, runner.stream_block_rows(65536, a.d * 2), a.d, a.k)
        kw = dict(epsilon=1.0, delta=1e-5, classes=range(a.k), random_state=0, method=a.method, center=False,
                  memory_limit=0, steps=None if a.method == "adam1" else 2)
        privlin.fit(path, **kw)
        times = []
        for _ in range(3):
            t = time.perf_counter()
            privlin.fit(path, **kw)
            times.append(time.perf_counter() - t)
        print(f"d={a.d} k={a.k} {a.method}: one-block fit {sorted(times)[1]:.3f} s (median of 3)")
        prof = cProfile.Profile()
        prof.runcall(privlin.fit, path, **kw)
        st = pstats.Stats(prof)
        st.sort_stats("cumulative").print_stats(30)
        st.sort_stats("tottime").print_stats(15)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
