"""Benchmark (issue 37.1): the quickstart as a new user runs it, cold and warm, against scikit-learn's unit.

    .venv/bin/python benchmarks/bench_quickstart.py [--repeats 1]

Each run is ``python -m experiments.quickstart --no-progress --out TMP`` in a fresh process: *cold* with an empty
persistent compilation cache and no stores (featurize + 60 fits + k-NN), *warm* on the cache the cold run filled
and the stores it wrote (fits only). The unit is scikit-learn's ``LogisticRegression().fit`` on the same digits
pixels (1437 × 64), the fastest of 7 in this process. Writes the ``bench_quickstart`` section of
benchmarks/results/privlin.md.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)


def sklearn_unit() -> float:
    import warnings

    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    X, y = load_digits(return_X_y=True)
    best = float("inf")
    for _ in range(7):
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            LogisticRegression().fit(X[:1437], y[:1437])
        best = min(best, time.perf_counter() - t)
    return best


def quickstart(out: str, cache: str) -> float:
    env = {**os.environ, "XDG_CACHE_HOME": cache,
           "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "experiments.quickstart", "--no-progress", "--out", out], cwd=ROOT,
                   env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    args = p.parse_args()
    unit = sklearn_unit()
    cold, warm = [], []
    for _ in range(args.repeats):
        tmp = tempfile.mkdtemp(prefix="bench_quickstart_")
        try:
            out, cache = os.path.join(tmp, "out"), os.path.join(tmp, "cache")
            cold.append(quickstart(out, cache))
            warm.append(quickstart(out, cache))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"cold {cold[-1]:.1f} s, warm {warm[-1]:.1f} s", flush=True)
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    load = os.getloadavg()[0]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    text = (f"### The quickstart (`python -m experiments.quickstart`; `python benchmarks/bench_quickstart.py`; "
            f"{cores} cores of {os.cpu_count()} ({platform.machine()}), load {load:.1f}; {datetime.date.today()})\n\n"
            f"Fresh processes; median of {args.repeats}. In parentheses: × scikit-learn's `LogisticRegression().fit` "
            f"on the same 1437 × 64 digits pixels in this process, the fastest of 7 ({unit * 1e3:.0f} ms).\n\n"
            "| run | wall | what it does |\n|---|---:|---|\n"
            f"| cold: empty compilation cache, no stores | {med(cold):.1f} s ({med(cold) / unit:.0f}×) | featurize "
            "digits twice (`vip_toy`, `pixels`), 2 × 30 private fits (3 draws × 5 ε × 2 methods), k-NN |\n"
            f"| warm: the cache and stores of the cold run | {med(warm):.1f} s ({med(warm) / unit:.0f}×) | the same "
            "fits on the stores already written |\n")
    from _results import write_section
    write_section(os.path.join(args.results, "privlin.md"), "bench_quickstart", text)
    print(text)


if __name__ == "__main__":
    main()
