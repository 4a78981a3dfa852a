"""The PRIVACY.md tightness table: claimed ε vs audited lower bound, per method, at ε ∈ {1, 2, 4, 8}.

    python benchmarks/bench_audit_table.py [--runs 20000] [--methods all]

For each method in ``privlin.audit.AUDITS``: the canary audit on digits with
``--runs`` runs. Two reference columns, same evaluation runs, 95 % Clopper–Pearson:
"exact Gaussian" is what a perfect likelihood-ratio attacker would certify against a Gaussian mechanism
meeting the claim with equality (bound/that measures the attack); "ceiling" is what a perfect attack with no
error at all certifies (``AuditResult.ceiling``): no claim above it can be refuted by an audit of this size.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from scipy.stats import norm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from privlin import accounting  # noqa: E402
from privlin import audit as A  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "privacy.md")


def exact_gaussian_bound(eps: float, delta: float, n_eval: int, confidence: float = 0.95) -> float:
    """Best bound this audit design can give on an exact Gaussian mechanism at (eps, delta)."""
    mu = accounting.gdp_mu_for(eps, delta)
    t = np.linspace(-4, mu + 8, 4000)
    fp = np.rint(n_eval * norm.sf(t))
    fn = np.rint(n_eval * norm.cdf(t - mu))
    _, fpr_hi = A.clopper_pearson(fp, n_eval, 1 - confidence)
    _, fnr_hi = A.clopper_pearson(fn, n_eval, 1 - confidence)
    return float(np.max(A.epsilon_from_error_rates(fpr_hi, fnr_hi, delta)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20000)
    p.add_argument("--methods", nargs="+", default=["all"])
    p.add_argument("--epsilon", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    methods = sorted(A.AUDITS) if args.methods == ["all"] else args.methods
    n_eval = (args.runs // 2) - int(args.runs // 2 * 0.5)  # runs per world left for the bound
    lines = [f"| method | claimed ε | audited ε ≥ | exact Gaussian at the claim | ceiling ({args.runs} runs) | "
             "claim testable | attack | audit time |", "|---|---|---|---|---|---|---|---|"]
    for m in methods:
        for eps in args.epsilon:
            t = time.perf_counter()
            res = A.audit_method(m, eps, delta=args.delta, runs=args.runs)
            wall = time.perf_counter() - t
            c = exact_gaussian_bound(eps, args.delta, n_eval)
            lines.append(f"| `{m}` | {eps:g} | {res.epsilon_lb:.2f} | {c:.2f} | {res.ceiling:.2f} | "
                         f"{'yes' if eps < res.ceiling else 'no'} | {res.attack.split(' (')[0]} | {wall:.1f} s |")
            print(lines[-1], flush=True)
    if not args.no_write:
        with open(RESULTS, "a", encoding="utf-8") as fh:
            fh.write(f"\n### Audit tightness on digits, δ={args.delta:g}, 95 % confidence "
                     f"(`benchmarks/bench_audit_table.py --runs {args.runs}`)\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
