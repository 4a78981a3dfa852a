"""What charging a fit costs on a store split of N items (default 1.28M, ImageNet's train split): the ledger home
(read the split's items, name their set, check every item group's cap, record the entry in one SQLite transaction)
beside the ledger it replaced (a JSON file beside the split, anchored in the split's metadata). Goal: at most 1 s
more than before.

    python benchmarks/bench_ledger.py [--rows 1280000] [--repeats 3] [--write]

``--write`` puts the table in ``benchmarks/results/privacy.md`` (section ``bench_ledger``); run
``python benchmarks/assemble.py`` after.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _store(url: str, n: int) -> None:
    import numpy as np

    import stores

    items = np.array(np.frombuffer(os.urandom(16 * n), dtype="S16").tobytes().hex()).item()
    items = np.array([items[32 * i:32 * (i + 1)] for i in range(n)], dtype="U32")
    w = stores.create_split(url, "train", n_rows=n, dim=1, dtype="float16")
    for s in w.pending():
        a, b = w.shard_bounds(s)
        w.write_shard(s, np.zeros((b - a, 1), np.float16), np.zeros(b - a, np.int64),
                      np.arange(a, b).astype(str), items=items[a:b])
    w.finalize()


def _time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_280_000, help="items in the split (default: 1280000)")
    p.add_argument("--repeats", type=int, default=3, help="charges timed per route; the median is shown (default: 3)")
    p.add_argument("--write", action="store_true", help="write the table into benchmarks/results/privacy.md")
    args = p.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="bench-ledger-")
    os.environ["PRIVLIN_LEDGER_HOME"] = os.path.join(tmp, "home")
    from dp_accounting import dp_event as ev

    from privlin.ledger import PrivacyLedger
    from privlin.ledger.core import StoreAnchor, ledger_path

    url = os.path.join(tmp, "s.zarr")
    t = time.perf_counter()
    _store(url, args.rows)
    print(f"store of {args.rows} rows written in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    fit = ev.GaussianDpEvent(5.0)

    def before():  # the route this change replaced: privlin's for_split of a store, then the charge
        led = PrivacyLedger(ledger_path(url, "train"), anchor=StoreAnchor(url, "train"), cap=(1e6, 1e-5))
        led.charge(fit, mechanism="fit", epsilon=1.0, delta=1e-5)

    def now():
        PrivacyLedger.for_split(url, "train", cap=(1e6, 1e-5)).charge(fit, mechanism="fit", epsilon=1.0, delta=1e-5)

    t = time.perf_counter()
    now()  # the first charge also stores the set (20 MB for 1.28M items)
    first = time.perf_counter() - t
    old, new = _time(before, args.repeats), _time(now, args.repeats)
    load = os.getloadavg()[0]
    table = "\n".join([
        f"### Charging a fit on {args.rows:,} items (`benchmarks/bench_ledger.py --rows {args.rows}`)",
        "",
        f"Median of {args.repeats} charges, each from a fresh handle as a fit makes one; 2-core CPU, load "
        f"{load:.2f}. Goal: the ledger home adds at most 1 s per charge.",
        "",
        "| route | s per charge | extra vs before |",
        "|---|---:|---:|",
        f"| before: ledger file beside the split, anchored in its metadata | {old:.3f} | — |",
        f"| ledger home: read the items, name their set, check, record (set already stored) | {new:.3f} | "
        f"{new - old:+.3f} s |",
        f"| ledger home, first charge of this set (stores it) | {first:.3f} | {first - old:+.3f} s |",
    ])
    print(table)
    if args.write:
        from _results import write_section

        write_section(os.path.join(ROOT, "benchmarks", "results", "privacy.md"), "bench_ledger", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
