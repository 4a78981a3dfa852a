"""Benchmark: a whole ε-sweep vs one fit on the same store, and vs opacus once per ε (ratios, same run).

    .venv/bin/python benchmarks/bench_sweep.py                    # n=200k, d=768, 100 classes (adam1 rows)
    .venv/bin/python benchmarks/bench_sweep.py --n 20000 --grid-n 10000 --opacus-n 5000
    .venv/bin/python benchmarks/bench_sweep.py --classes 2,10,50,100 --before main   # issue 47: the k grid

``--classes``: issue 47's rows instead (section ``bench_sweep_classes`` of benchmarks/results/sweep.md): per class
count, a 10-ε ``adam1`` sweep vs one fit on random blobs in memory (``--blobs`` N×d), measured by
``bench_first_fit.py``'s sweep row (one fit and one sweep alternated, compiled programs warmed first, the call's
cost per further setting), each in a fresh process; with ``--before REV``, the same row with REV's code (``git
archive`` into a temporary folder) right after it, so both run in the same sitting.

Rows (appended to benchmarks/results/sweep.md):
1. adam1: privlin.sweep over 10 ε values vs one privlin.fit(method="adam1") on the same store (goal ≤ 1.3×).
2. sgd (full-batch DP-SGD, T steps): privlin.sweep over 20 settings (5 ε × 4 lr) vs one privlin.fit with the same
   T on the same store (goal ≤ 3×).
3. opacus: one DP-SGD epoch (batch 1000, nn.Linear) per ε, 10 ε values, vs privlin.sweep's 10 adam1 settings on
   the same rows (n scaled down for opacus, stated in the row).
Wall-clock times are medians of ``--repeat`` runs after a warm-up (JAX compilation excluded).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import stores  # noqa: E402
import privlin  # noqa: E402
from privlin.sweep import sweep  # noqa: E402

EPS10 = [0.25, 0.5, 1, 2, 3, 4, 6, 8, 12, 16]


def make_store(path, n, d, k, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, d)).astype(np.float32)
    shard = 8192
    w = stores.create_split(path, "train", n_rows=n, dim=d, dtype="float16", shard_rows=shard,
                            root_attrs={"classes": [str(c) for c in range(k)]})
    for i in w.pending():
        a, b = w.shard_bounds(i)
        y = rng.integers(0, k, b - a)
        X = centers[y] + rng.normal(size=(b - a, d)).astype(np.float32)
        w.write_shard(i, X.astype(np.float16), y.astype(np.int64), np.array([str(j) for j in range(a, b)]))
    w.finalize()
    return stores.open(path)


def timed(fn, repeat):
    fn()  # warm-up: compilation
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def opacus_epoch_time(X, y, k, sigma):
    import torch
    from opacus import PrivacyEngine

    model = torch.nn.Linear(X.shape[1], k)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ds = torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
    loader = torch.utils.data.DataLoader(ds, batch_size=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = PrivacyEngine().make_private(module=model, optimizer=opt, data_loader=loader,
                                                          noise_multiplier=sigma, max_grad_norm=1.0)
    t = time.perf_counter()
    for xb, yb in loader:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    return time.perf_counter() - t


CLASSES_CHILD = r"""
import json, sys
tree, k, n, d, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
sys.path[:0] = [tree + "/benchmarks", tree]
from bench_first_fit import _sweep_row
print(json.dumps(_sweep_row(n, d, repeat, k, store=False)))
"""


def part_classes(ks, blobs: str, repeat: int, before: str | None) -> str:
    """Issue 47's rows: one per class count in ``ks`` with this checkout's code, and with ``before``'s right after."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    n, d = (int(v) for v in blobs.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        trees = [("this change", root)]
        if before:
            rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", before], check=True, capture_output=True,
                                 text=True).stdout.strip()
            tree = os.path.join(tmp, "before")
            os.makedirs(tree)
            archive = subprocess.run(["git", "-C", root, "archive", rev], check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
            trees.append((f"before ({rev})", tree))
        got = {label: [] for label, _ in trees}
        for k in ks:
            for label, tree in trees:
                out = subprocess.run([sys.executable, "-c", CLASSES_CHILD, tree, str(k), str(n), str(d), str(repeat)],
                                     check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": tree})
                got[label].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(label, got[label][-1][0], flush=True)
    head = "| rows | one fit | sweep | ratio wall [CPU] | load | goal |\n|---|---:|---:|---:|---:|---|"
    text = (f"### 10-ε adam1 sweep vs one fit by class count (issue 47; `python benchmarks/bench_sweep.py --classes "
            f"{','.join(map(str, ks))}{' --before ' + before if before else ''}`; {os.cpu_count()}-core CPU "
            f"({platform.machine()}), shared with other jobs (load {os.getloadavg()[0]:.1f}); "
            f"{time.strftime('%Y-%m-%d', time.gmtime())})\n\n"
            "Each row from `bench_first_fit.py`'s sweep row in a fresh process: ε 0.25 … 16 against one fit at ε = 1, "
            f"default preprocessing, random blobs in memory, compiled programs warmed first, median of {repeat}, "
            "one fit and one sweep alternated; wall time, CPU time of the process in brackets"
            + (", each row's code and the code before run one after the other, class count by class count" if before
               else "") + ".\n")
    for label, rows in got.items():
        text += f"\n{label}:\n\n{head}\n" + "\n".join(r for r, _ in rows) + "\n"
    for label, rows in got.items():
        text += f"\n{label}, where the time goes:\n\n" + "\n".join(s for _, s in rows) + "\n"
    return text


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--classes", default=None, help="issue 47's rows instead: class counts, comma-separated")
    p.add_argument("--blobs", default="20000x768", help="N x d of the --classes rows (in memory)")
    p.add_argument("--before", default=None, help="git revision whose code also runs the --classes rows")
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--grid-n", type=int, default=20_000, help="rows for the multi-step grid (held in memory)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--opacus-n", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "sweep.md"))
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    if args.classes:
        from _results import write_section

        text = part_classes([int(v) for v in args.classes.split(",")], args.blobs, args.repeat, args.before)
        print(text)
        write_section(args.out, "bench_sweep_classes", text)
        return
    classes = np.arange(args.k)
    rows = []
    machine = f"{os.cpu_count()}-core CPU ({platform.machine()}), shared"
    with tempfile.TemporaryDirectory() as tmp:
        st = make_store(os.path.join(tmp, "big.zarr"), args.n, args.d, args.k)
        one = timed(lambda: privlin.fit(st, epsilon=1.0, method="adam1", center=False, classes=classes, random_state=0),
                    args.repeat)
        many = timed(lambda: sweep(st, epsilon=EPS10, method="adam1", center=False, classes=classes,
                                   eval_split=None, random_state=0), args.repeat)
        rows.append(f"| adam1: 10-ε sweep vs 1 fit, same store (n={args.n}, d={args.d}, k={args.k}, float16) | "
                    f"{one:.2f} s | {many:.2f} s | **{many / one:.2f}×** (goal ≤ 1.3×) | {machine} |")

        sg = make_store(os.path.join(tmp, "grid.zarr"), args.grid_n, args.d, args.k, seed=1)
        one = timed(lambda: privlin.fit(sg, epsilon=1.0, method="sgd", steps=args.steps, learning_rate=1.0, center=False,
                                    classes=classes, random_state=0), args.repeat)
        many = timed(lambda: sweep(sg, epsilon=[0.5, 1, 2, 4, 8], method="sgd", steps=args.steps,
                                   learning_rate=[0.5, 1.0, 2.0, 4.0], center=False, classes=classes,
                                   eval_split=None, random_state=0), args.repeat)
        rows.append(f"| sgd: 20-setting grid (5 ε × 4 lr, T={args.steps}) vs 1 fit, same store (n={args.grid_n}, "
                    f"d={args.d}, k={args.k}) | {one:.2f} s | {many:.2f} s | **{many / one:.2f}×** (goal ≤ 3×) | "
                    f"{machine} |")

        X, y = sg["train"].to_numpy(dtype=np.float32)
        X, y = X[:args.opacus_n], y[:args.opacus_n]
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        opacus_total = sum(opacus_epoch_time(X, y, args.k, 1.0) for _ in EPS10)
        ours = timed(lambda: sweep((X, y), epsilon=EPS10, method="adam1", center=False, classes=classes,
                                   eval_split=None, random_state=0), args.repeat)
        rows.append(f"| opacus (1 epoch DP-SGD, batch 1000, per ε) × 10 ε vs privlin 10-ε adam1 sweep "
                    f"(n={len(y)}, d={args.d}, k={args.k}) | {opacus_total:.2f} s | {ours:.2f} s | "
                    f"**{opacus_total / ours:.1f}× faster** | {machine} |")
    header = ("| benchmark | baseline | sweep / ours | ratio | machine |\n|---|---:|---:|---:|---|")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    new = not os.path.exists(args.out)
    with open(args.out, "a") as f:
        if new:
            f.write("## ε-sweeps (privlin.sweep)\n\n" + header + "\n")
        f.write("\n".join(rows) + "\n")
    print(header)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
