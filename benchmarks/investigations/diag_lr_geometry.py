"""Which sets want a smaller learning rate, and could a private release tell them apart?  (issue 15, item 1)

    python benchmarks/investigations/diag_lr_geometry.py [--only mix-e,relu-256,...] [--eps 0.5 1 2 8] [--share 0.05]

``diag_lr_dims.py`` found that d/N does not pick the best multiple of the default rate: the generator's mixtures
want ×0.03–0.5, digits features want ×1.  This measures one candidate that does separate them: the **effective
rank** r = tr Σ / λ_max(Σ) of the rows as training sees them (Σ their centered covariance, after the plan's
normalization, centering and scaling stage; one fit at seed 0 gives the released maps), against k.  It is
non-private here (a diagnosis: nothing is chosen from it).

For a rule ``lr = default × min(1, √(k/r))`` to run, r would have to be released.  The column ``r private`` is the
lower bound a release could give: λ_max of the centered scatter Σᵢ(xᵢ − x̄)(xᵢ − x̄)ᵀ of unit rows moves by at most
3 when one row is zeroed (the rank-2 change x xᵀ(1 − 1/N) − (s′xᵀ + x s′ᵀ)/N with ‖s′‖ ≤ N − 1; attained by
N − 1 rows at u and one at −u), so with ``--share`` of the fit's μ² it is released with noise of standard deviation
3/μ_r, and an upper confidence bound λ̂ + 2·std gives r ≥ N·tr/(N·λ + 2·std).  Where that bound stays near k the
rule cannot lower the rate, whatever the data.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]  # privlin; bench_defaults and _opacus beside it
import privlin  # noqa: E402
from privlin import accounting, runner  # noqa: E402
import bench_defaults as bd  # noqa: E402
import diag_lr_dims as dl  # noqa: E402

SENSITIVITY = 3.0  # of λ_max of the centered scatter of unit rows under zero-out (module docstring)


def training_rows(Xtr, ytr, k, eps):
    """The rows the default plan trains on at ε (the released maps of one fit, seed 0), float64."""
    m = privlin.DPLinearClassifier(epsilon=eps, delta=bd.DELTA, classes=range(k), random_state=0).fit(Xtr, ytr)
    return np.asarray(runner.preprocess_rows(m.plan_, Xtr, m.mean_, m.scaling_, m.radius_), np.float64)


def effective_rank(R):
    """(r, tr Σ, λ_max Σ) of the rows' centered covariance Σ."""
    C = R - R.mean(0)
    lam = np.linalg.eigvalsh(C.T @ C / len(C))
    return lam.sum() / lam[-1], lam.sum(), lam[-1]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sets = {**dl.SETS, **{n: bd.DATASETS[n] for n in ("iris", "mix-a", "mix-b", "mix-c", "vip_toy", "pixels")}}
    p.add_argument("--only", default=",".join(sets))
    p.add_argument("--eps", type=float, nargs="+", default=[0.5, 1, 2, 8])
    p.add_argument("--share", type=float, default=0.05, help="share of μ² a release of λ_max would take")
    p.add_argument("--stores", default="/tmp/privlin-bench-digits", help="folder for the digits feature stores")
    args = p.parse_args(argv)
    print("| data | N | d | k | ε | r | r/k | √(k/r) | r private (lower bound) | √(k/r) from it |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.only.split(","):
        title, Xtr, ytr, _, _, k = bd.load_dataset(name, args.stores, sets)
        n = len(ytr)
        for eps in args.eps:
            r, tr, lam = effective_rank(training_rows(Xtr, ytr, k, eps))
            std = SENSITIVITY / (math.sqrt(args.share) * accounting.gdp_mu_for(eps, bd.DELTA))
            r_lb = n * tr / (n * lam + 2 * std)
            print(f"| {title} | {n} | {Xtr.shape[1]} | {k} | {eps:g} | {r:.1f} | {r / k:.1f} | "
                  f"{min(1.0, math.sqrt(k / r)):.2f} | {r_lb:.1f} | {min(1.0, math.sqrt(k / r_lb)):.2f} |", flush=True)


if __name__ == "__main__":
    main()
