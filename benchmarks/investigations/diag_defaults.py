"""Where privlin's defaults lose accuracy without any noise: the pipeline's geometry and optimization at ε = ∞.

    python benchmarks/investigations/diag_defaults.py [--only iris,mix-a,mix-b] [--sub 50000]

Issue 15 diagnosis (benchmarks/investigations/README.md, "Why the defaults fall short").  On each of bench_defaults.py's data sets, with no
privacy noise at all, the test accuracy of

* ``std``: scikit-learn's LogisticRegression (C = 1) on standardized features (the benchmark's non-private column);
* ``std+unit``: the same on standardized rows scaled to unit norm (what Opacus is given), C = 1e4;
* ``unit-center-unit``: rows normalized, centered with the exact mean of the normalized rows, normalized again —
  privlin's preprocessing without noise and without the scaling stage — C = 1e4;
* ``center-unit``: rows centered with the exact mean first, then normalized (no normalization before centering);
* ``privlin ∞``: ``DPLinearClassifier(epsilon=inf)`` with the default steps (T = 100), with and without the scaling
  stage, and with T = 1000 (the optimization's share of the gap);
* ``LR on privlin's rows``: LogisticRegression (C = 1e4) on the rows privlin's ε = ∞ fit trains on (with and without
  the scaling stage): the geometry's share of the gap.

No test split is used to choose anything here; it only measures ceilings.  ``--sub`` caps the rows the scikit-learn
fits on privlin's rows see (the N = 200 000 set).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]  # privlin; bench_defaults and _opacus beside it
import privlin  # noqa: E402
from privlin import runner  # noqa: E402
import bench_defaults as bd  # noqa: E402


def _lr(A, B, ytr, yte, C):
    from sklearn.linear_model import LogisticRegression

    return 100 * LogisticRegression(C=C, max_iter=5000).fit(A, ytr).score(B, yte)


def _unit(A):
    return A / np.maximum(np.linalg.norm(A, axis=1, keepdims=True), 1e-30)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="iris,mix-a,mix-b")
    p.add_argument("--sub", type=int, default=50000)
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    print("| data | std (C=1) | std+unit | unit-center-unit | center-unit | privlin ∞ T=100 | privlin ∞ T=100, "
          "scale=False | privlin ∞ T=1000 | LR on privlin's rows | LR on privlin's rows, scale=False |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.only.split(","):
        title, Xtr, ytr, Xte, yte, k = bd.load_dataset(name, "/tmp/privlin-bench-digits")
        Xtr, Xte = np.asarray(Xtr, np.float64), np.asarray(Xte, np.float64)
        S, T = bd.standardized(Xtr, Xte)
        cells = [_lr(S, T, ytr, yte, 1.0), _lr(_unit(S), _unit(T), ytr, yte, 1e4)]
        U, Ut = _unit(Xtr), _unit(Xte)
        m1 = U.mean(0)
        cells.append(_lr(_unit(U - m1), _unit(Ut - m1), ytr, yte, 1e4))
        m0 = Xtr.mean(0)
        cells.append(_lr(_unit(Xtr - m0), _unit(Xte - m0), ytr, yte, 1e4))
        fits = {}
        for label, kw in (("T=100", {}), ("T=100, scale=False", {"scale": False}), ("T=1000", {"steps": 1000})):
            fits[label] = privlin.DPLinearClassifier(epsilon=math.inf, classes=range(k), **kw).fit(Xtr, ytr)
            cells.append(100 * fits[label].score(Xte, yte))
        sub = slice(0, args.sub)
        for label in ("T=100", "T=100, scale=False"):
            m = fits[label]
            rows = np.asarray(runner.preprocess_rows(m.plan_, Xtr[sub], m.mean_, m.scaling_, m.radius_))
            rows_te = np.asarray(runner.preprocess_rows(m.plan_, Xte, m.mean_, m.scaling_, m.radius_))
            cells.append(_lr(rows, rows_te, ytr[sub], yte, 1e4))
        print(f"| {title} | " + " | ".join(f"{c:.1f}" for c in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
