"""Where the low-ε rows of the defaults table lose: the noise of each preprocessing release, the budget's split,
and a prototype of re-centering rounds (issue 15).  A diagnosis read on the test split; nothing is set from it.

    python benchmarks/investigations/diag_releases.py exact  --only vip_toy,mix-a,pixels --eps 0.5 1 [--what none,center,scale,all,mom,wh]
    python benchmarks/investigations/diag_releases.py shares --only vip_toy,iris --eps 0.5 1 --param center_share --values 0.05,0.15,0.3
    python benchmarks/investigations/diag_releases.py zoom   --only vip_toy,iris --eps 0.5 1 --rounds 0:0,1:0.05,2:0.05 [--center-share S]

* ``exact``: the default fit with the named releases' noise multipliers set to 10⁻³ (about exact) and the
  training steps' σ unchanged: what each release's noise costs.  (The other releases keep their σ: the runner
  derives them as fixed ratios to the centering's, ``Plan._per_center``, and those ratios are kept.)
* ``shares``: the default fit with one share parameter set (``center_share``, ``scale_share``).
* ``zoom``: K rounds before the fit, each releasing the mean of the unit rows (Gaussian, sensitivity 1 under
  zero-out, J–S shrunk toward 0), subtracting it and normalizing again: the re-normalization zooms a tight cloud,
  so each round's noise is measured against the residual offset, not the first norm.  The K rounds spend a share
  Z of μ² (GDP); the fit then runs at the ε of μ·√(1 − Z), so the total is the same (δ = 1e-5).  The rows reach
  the fit already unit-norm, so ``radial`` sees no row norms there (and in the K = 0 baseline of this mode).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]  # privlin; bench_defaults and _opacus beside it
import privlin  # noqa: E402
from privlin import accounting, estimator, workflow  # noqa: E402
from privlin.releases import preprocess  # noqa: E402
import bench_defaults as bd  # noqa: E402

FIELDS = {"none": (), "center": ("sigma_center",), "scale": ("sigma_scale", "sigma_whiten"),
          "mom": ("sigma_scale",), "wh": ("sigma_whiten",), "radius": ("sigma_radius",),
          "recenter": ("sigma_recenter",), "prep": ("sigma_recenter", "sigma_center"),
          "all": ("sigma_recenter", "sigma_center", "sigma_scale", "sigma_whiten", "sigma_radius")}


def _cell(label, accs):
    return f"{label}: {bd.cell(accs)}"


def exact(data, e, seeds, what):
    make = workflow.make_plan
    out = []
    try:
        for w in what:
            def patched(*a, _f=FIELDS[w], **kw):
                p = make(*a, **kw)
                return dataclasses.replace(p, chain=tuple((r, 1e-3 if f"sigma_{r.name}" in _f else s) for r, s in p.chain))
            workflow.make_plan = patched
            out.append(_cell(w, bd.privlin_accs(e, seeds, *data)))
    finally:
        workflow.make_plan = make
    return out


def shares(data, e, seeds, param, values):
    return [_cell(f"{v:g}", bd.privlin_accs(e, seeds, *data, **{param: v})) for v in values]


def zoom(data, e, seeds, rounds, center_share):
    Xtr, ytr, Xte, yte, k = data
    mu, n, d = accounting.gdp_mu_for(e, bd.DELTA), Xtr.shape[0], Xtr.shape[1]
    unit = lambda A: np.asarray(preprocess.normalize_rows(A), np.float64)  # noqa: E731
    out = []
    for K, Z in rounds:
        accs = []
        for s in range(seeds):
            rng = np.random.default_rng(1000 + s)
            R, T = unit(Xtr), unit(Xte)
            for _ in range(K):
                sigma = 1.0 / (math.sqrt(Z / K) * mu)
                m = np.asarray(preprocess.shrink((R.sum(0) + rng.normal(size=d) * sigma) / n, sigma / n, 0.0))
                R, T = unit(R - m), unit(T - m)
            kw = {"center_share": center_share} if (K and center_share is not None) else {}
            est = privlin.DPLinearClassifier(epsilon=accounting.gdp_epsilon(1 / (mu * math.sqrt(1 - Z)), bd.DELTA) if K else e, delta=bd.DELTA,
                                             classes=range(k), random_state=s, **kw)
            accs.append(est.fit(R.astype(np.float32), ytr).score(T.astype(np.float32), yte))
        out.append(_cell(f"K={K} Z={Z:g}", accs))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("exact", "shares", "zoom"))
    ap.add_argument("--only", default="vip_toy,mix-a,pixels")
    ap.add_argument("--eps", type=float, nargs="+", default=[0.5, 1.0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--stores", default="/tmp/privlin-bench-digits")
    ap.add_argument("--what", default="none,center,scale,all")
    ap.add_argument("--param", default="center_share")
    ap.add_argument("--values", default="0.05,0.15,0.3")
    ap.add_argument("--rounds", default="0:0,1:0.05,2:0.05", help="K:Z pairs")
    ap.add_argument("--center-share", type=float, default=None, help="zoom: the fit's own centering share")
    a = ap.parse_args(argv)
    for name in a.only.split(","):
        title, *data = bd.load_dataset(name, a.stores)
        for e in a.eps:
            if a.mode == "exact":
                cells = exact(data, e, a.seeds, a.what.split(","))
            elif a.mode == "shares":
                cells = shares(data, e, a.seeds, a.param, [float(v) for v in a.values.split(",")])
            else:
                rounds = [(int(c.split(":")[0]), float(c.split(":")[1])) for c in a.rounds.split(",")]
                cells = zoom(data, e, a.seeds, rounds, a.center_share)
            print(f"| {title} | {e:g} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
