"""Benchmark (issues 37.1, 47): the quickstart as a new user runs it, cold and warm: wall, CPU time and peak memory.

    .venv/bin/python benchmarks/bench_quickstart.py [--repeats 1] [--before /path/to/other/checkout]

Each run is ``python -m experiments.quickstart --no-progress --out TMP`` in a fresh process: *cold* with an empty
persistent compilation cache and no stores (featurize + 60 fits + k-NN), *warm* on the cache the cold run filled
and the stores it wrote (fits only). Peak resident memory and CPU time are the child's (``os.wait4``: its own and
its waited-for children's). ``--before``: also run another checkout's quickstart first (e.g. main's), for a
before/after in one sitting. The unit is scikit-learn's ``LogisticRegression().fit`` on the same digits pixels
(1437 × 64), the fastest of 7 in this process. Writes the ``bench_quickstart`` section of
benchmarks/results/privlin.md.
"""
from __future__ import annotations

import argparse
import dataclasses
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


@dataclasses.dataclass
class Run:
    """One quickstart process: wall and CPU seconds, peak resident memory (GB), load average before and after."""

    wall: float
    cpu: float
    peak_gb: float
    load: tuple[float, float]


def quickstart(out: str, cache: str, code: str = ROOT) -> Run:
    env = {**os.environ, "XDG_CACHE_HOME": cache,
           "PYTHONPATH": os.pathsep.join(p for p in (code, os.environ.get("PYTHONPATH")) if p)}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    load = os.getloadavg()[0]
    t = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "experiments.quickstart", "--no-progress", "--out", out],
                             cwd=code, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, child.args)
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 2**20, (load, os.getloadavg()[0]))


def _row(name: str, runs: list[Run], unit: float, what: str) -> str:
    r = sorted(runs, key=lambda r: r.wall)[len(runs) // 2]
    return (f"| {name} | {r.wall:.1f} s ({r.wall / unit:.0f}×) | {r.cpu:.1f} s | {r.peak_gb:.2f} GB | "
            f"{r.load[0]:.1f} → {r.load[1]:.1f} | {what} |\n")


def _commit(code: str) -> str:
    r = subprocess.run(["git", "-C", code, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


def _measure(code: str, repeats: int) -> tuple[list[Run], list[Run]]:
    cold, warm = [], []
    for _ in range(repeats):
        tmp = tempfile.mkdtemp(prefix="bench_quickstart_")
        try:
            out, cache = os.path.join(tmp, "out"), os.path.join(tmp, "cache")
            cold.append(quickstart(out, cache, code))
            warm.append(quickstart(out, cache, code))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"{code}: cold {cold[-1]}, warm {warm[-1]}", flush=True)
    return cold, warm


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--before", help="another checkout whose quickstart runs first, in the same sitting")
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    args = p.parse_args()
    unit = sklearn_unit()
    rows = ""
    for code in ([args.before] if args.before else []) + [ROOT]:
        cold, warm = _measure(code, args.repeats)
        at = f" ({_commit(code)})" if args.before else ""
        rows += (_row(f"cold{at}: empty compilation cache, no stores", cold, unit,
                      "featurize digits with the quickstart's two backbones, 2 × 30 private fits (3 draws × 5 ε × "
                      "2 methods), k-NN")
                 + _row(f"warm{at}: the cache and stores of the cold run", warm, unit,
                        "the same fits on the stores already written"))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    text = (f"### The quickstart (`python -m experiments.quickstart`; `python benchmarks/bench_quickstart.py`; "
            f"{cores} cores of {os.cpu_count()} ({platform.machine()}); {datetime.date.today()})\n\n"
            f"Fresh processes; median of {args.repeats}. In parentheses: × scikit-learn's `LogisticRegression().fit` "
            f"on the same 1437 × 64 digits pixels in this process, the fastest of 7 ({unit * 1e3:.0f} ms). CPU time "
            "and peak resident memory are the child's (`os.wait4`); load: the 1-minute load average before → after."
            "\n\n| run | wall | CPU | peak memory | load | what it does |\n|---|---:|---:|---:|---|---|\n" + rows)
    from _results import write_section
    write_section(os.path.join(args.results, "privlin.md"), "bench_quickstart", text)
    print(text)


if __name__ == "__main__":
    main()
