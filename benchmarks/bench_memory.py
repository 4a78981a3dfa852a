"""Benchmark: peak memory of a privlin fit and of a sweep as N, d and k grow, against the runner's bound.

    .venv/bin/python benchmarks/bench_memory.py            # the table below, appended to benchmarks/results/privlin.md
    .venv/bin/python benchmarks/bench_memory.py --quick    # two rows

Each cell is one child process (random rows held in memory, ``progress=False``): its peak resident memory
(``ru_maxrss``) minus that of a child that only imports privlin, makes the rows and loads JAX's CPU client;
privlin's compilation cache is off in every child, so each cell includes XLA's compiles (the cold case).  The
bound beside it is the runner's own accounting, what ``memory_limit`` (default 1 GiB) is compared with: the rows
held (``runner.in_memory_bytes``) plus, for the settings of one call, ``runner.setting_bytes`` each (mapped rows of
centered sgd, six float64 d x d matrices per whitening or curvature release).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CHILD = r"""
import json, resource, sys, warnings
import numpy as np
n, d, k, method, count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
rng = np.random.default_rng(0)
y = rng.integers(0, k, n)
X = (rng.normal(size=(k, d))[y] + rng.normal(size=(n, d))).astype(np.float32)
import jax, jax.numpy as jnp
jnp.zeros(1).block_until_ready()
import privlin
from privlin import runner
from privlin.sweep import sweep
out = {}
if count:
    warnings.simplefilter("ignore")
    eps = [0.5, 1, 2, 4, 8, 16, 0.25, 3, 6, 12][:count]
    kw = dict(method=method, classes=list(range(k)), progress=False, random_state=0)
    if method == "sgd":
        kw["steps"] = 20
    if count == 1:
        privlin.fit((X, y), epsilon=eps[0], **kw)
    else:
        sweep((X, y), epsilon=eps, **kw)
out["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def peak(n, d, k, method, count) -> int:
    done = subprocess.run([sys.executable, "-c", CHILD, str(n), str(d), str(k), method, str(count)], cwd=ROOT,
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": ROOT, "PRIVLIN_COMPILATION_CACHE": "0"})  # every cell cold
    return json.loads(done.stdout.strip().splitlines()[-1])["peak"]


def accounting(n, d, k, sgd: bool) -> float:
    """The runner's own bound for one call of one setting (what ``memory_limit`` is compared with): the rows held
    (``runner.in_memory_bytes`` of float32 rows) and, for a centered sgd setting, its mapped rows and a whitening
    and a curvature release's six d x d float64 matrices each (``runner.setting_bytes``)."""
    from privlin import rows as runner_rows

    m = runner_rows.padded_len(runner_rows.loaded_len(n))
    rows = m * d * (2 * 4 + 8) + m * (k + 2) * 4
    return rows + (4.0 * m * d + 2 * 6 * 8.0 * (d + 1) ** 2 if sgd else 0.0)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "privlin.md"))
    args = p.parse_args(argv)
    grid = [(2048, 768, 10), (20480, 768, 10), (2048, 768, 100), (2048, 3072, 10)]
    if args.quick:
        grid = grid[:1]
    rows = []
    for n, d, k in grid:
        base = peak(n, d, k, "adam1", 0)
        cells = []
        for method, count in (("adam1", 1), ("adam1", 10), ("sgd", 1), ("sgd", 3)):
            got = peak(n, d, k, method, count)
            cells.append(f"{(got - base) / 2**20:,.0f}")
            print(n, d, k, method, count, f"{(got - base) / 2**20:.0f} MiB over {base / 2**20:.0f}", flush=True)
        bounds = f"{accounting(n, d, k, False) / 2**20:,.0f} / {accounting(n, d, k, True) / 2**20:,.0f}"
        rows.append(f"| {n} | {d} | {k} | {base / 2**20:,.0f} | " + " | ".join(cells) + f" | {bounds} |")
    load = os.getloadavg()[0]
    text = "\n".join([
        "## Peak memory of a fit and a sweep (bench_memory)",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {load:.1f}; MiB of peak resident "
        "memory above a child that made the rows and started JAX (its own peak in the 4th column); random rows "
        "in memory, sgd at 20 steps, sweeps over 10 (adam1) and 3 (sgd) ε; compiles included (cache off).",
        "",
        "| N | d | k | baseline MiB | adam1 fit | adam1 sweep 10 ε | sgd fit | sgd sweep 3 ε | runner's bound "
        "adam1 / sgd (MiB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "The runner's bound is what it compares with `memory_limit` (1 GiB by default: above it, fewer settings per "
        "call, then streaming); the peak above the baseline also holds XLA's compile and its temporaries, which "
        "the bound does not count: compare the columns.",
    ])
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _results import write_section

    write_section(args.out, "bench_memory", text)
    print(text)


if __name__ == "__main__":
    main()
