"""Does the best learning rate follow d/N?  A scan of the default rate's multiplier (issue 15, item 1).

    python benchmarks/investigations/diag_lr_dims.py [--only relu-1024,mix-1024,...] [--eps 0.5 2 8] [--seeds 2]

The lead from ``diag_tuning.py``: the N=5000, d=4096 mixture of the defaults table wants ×0.25 of the default rate
at every ε, and no other row of that table does.  Before a rule lowers the rate where d ≈ N, this checks it on sets
that are **not** in the table: Gaussian mixtures from the table's generator (``bench_defaults.mixture``, other
seeds and sizes, d/N from 0.13 to 2) and random-ReLU features of digits (``relu(x/16 @ R)``, R Gaussian 64×d: a
fixed random backbone whose features are collinear and low-rank, d/N 0.18 and 0.71).  Every fit is the default
``DPLinearClassifier`` with only ``learning_rate`` set to a multiple of the plan's default; accuracy on the test
split, mean of ``--seeds`` noise seeds.  Nothing here is chosen or tuned: it is a measurement of where the optimum
lies.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]  # privlin; bench_defaults and _opacus beside it
from privlin.plan import make_plan  # noqa: E402
import bench_defaults as bd  # noqa: E402

MULTIPLIERS = (1 / 32, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0)


def relu_digits(d, seed=0):
    """Digits through a fixed random ReLU layer of width ``d`` (stratified 80/20 split)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    R = np.random.default_rng(seed).normal(size=(64, d)) / 8
    F = np.maximum(X / 16 @ R, 0).astype(np.float32)
    Xtr, Xte, ytr, yte = train_test_split(F, y, test_size=0.2, stratify=y, random_state=seed)
    return Xtr, ytr, Xte, yte


SETS = {
    "relu-256": ("digits, random ReLU d=256", lambda: relu_digits(256)),
    "relu-1024": ("digits, random ReLU d=1024", lambda: relu_digits(1024)),
    "mix-8000": ("mixture N=8000 d=1024 k=2", lambda: bd.mixture(8000, 1024, 2, sep=0.4, seed=24)),
    "mix-4000": ("mixture N=4000 d=1024 k=5", lambda: bd.mixture(4000, 1024, 5, sep=0.5, seed=23)),
    "mix-2000": ("mixture N=2000 d=1024 k=2", lambda: bd.mixture(2000, 1024, 2, sep=0.5, seed=21)),
    "mix-1000": ("mixture N=1000 d=2048 k=2", lambda: bd.mixture(1000, 2048, 2, sep=0.6, seed=22)),
    "mix-e": (bd.DATASETS["mix-e"][0] + " (in the table)", bd.DATASETS["mix-e"][1]),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(SETS))
    p.add_argument("--eps", type=float, nargs="+", default=[0.5, 2, 8])
    p.add_argument("--seeds", type=int, default=2)
    args = p.parse_args(argv)
    head = " | ".join(f"×{m:g}" for m in MULTIPLIERS)
    print(f"| data | d/N | ε | {head} |\n|---|---:|---:|" + "---:|" * len(MULTIPLIERS))
    for name in args.only.split(","):
        title, Xtr, ytr, Xte, yte, k = bd.load_dataset(name, None, SETS)
        for eps in args.eps:
            plan = make_plan({"epsilon": eps, "delta": bd.DELTA}, n=len(ytr), dim=Xtr.shape[1], n_classes=k)
            acc = {m: 100 * np.mean(bd.privlin_accs(eps, args.seeds, Xtr, ytr, Xte, yte, k,
                                                    learning_rate=None if m == 1.0 else m * plan.learning_rate))
                   for m in MULTIPLIERS}
            best = max(acc.values())
            cells = " | ".join(f"**{a:.1f}**" if a >= best - 0.05 else f"{a:.1f}" for a in acc.values())
            print(f"| {title} | {Xtr.shape[1] / len(ytr):.2f} | {eps:g} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
