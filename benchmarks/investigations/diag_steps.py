"""Do more steps pay?  The default T=100 against T=300 (and 1000) on the defaults table's sets (issue 15, item 1).

    python benchmarks/investigations/diag_steps.py [--only mix-d,mix-b,...] [--eps 0.5 1 2 8] [--steps 100 300] [--seeds 3]

:func:`privlin.plan.default_learning_rate` holds the noise per logit fixed, so T steps at σ(T) ∝ √T move the model
as far as 100 do: more steps should buy nothing where the noise term sets the rate.  Where the stability cap sets
it (large N·μ: the N=200 000 mixture, whose noise term is 5–61× the cap at T=100), more steps at the capped rate
move the model further.  This measures both: every fit is the default ``DPLinearClassifier`` with only ``steps``
set (the plan recalibrates σ and the rates for it); accuracy on the test split, mean ± sd of ``--seeds`` noise
seeds.  The ``noise/cap`` column is the plan's noise term over the joint stability cap at T=100 (public).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]  # privlin; bench_defaults and _opacus beside it
import privlin  # noqa: E402
from privlin.plan import _joint_cap, _noise_rate, make_plan  # noqa: E402
import bench_defaults as bd  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="mix-d,mix-b,mix-e,pixels,vip_toy")
    p.add_argument("--eps", type=float, nargs="+", default=[0.5, 1, 2, 8])
    p.add_argument("--steps", type=int, nargs="+", default=[100, 300])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--stores", default="/tmp/privlin-bench-digits", help="folder for the digits feature stores")
    args = p.parse_args(argv)
    head = " | ".join(f"T={t}" for t in args.steps)
    print(f"| data | ε | noise/cap | {head} |\n|---|---:|---:|" + "---:|" * len(args.steps))
    for name in args.only.split(","):
        title, Xtr, ytr, Xte, yte, k = bd.load_dataset(name, args.stores)
        for eps in args.eps:
            plan = make_plan({"epsilon": eps, "delta": bd.DELTA}, n=len(ytr), dim=Xtr.shape[1], n_classes=k)
            ratio = (_noise_rate(plan.sigma, len(ytr), steps=plan.steps, momentum=plan.momentum, clip=plan.clip)
                     / _joint_cap(plan.momentum, plan.clip, plan.fit_intercept))
            t0, cells = time.time(), []
            for steps in args.steps:
                accs = bd.privlin_accs(eps, args.seeds, Xtr, ytr, Xte, yte, k, steps=steps)
                cells.append(bd.cell(accs))
            print(f"| {title} | {eps:g} | {ratio:.2f} | {' | '.join(cells)} |", f"({time.time() - t0:.0f} s)",
                  flush=True)


if __name__ == "__main__":
    main()
