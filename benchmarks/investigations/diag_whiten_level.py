"""Is a whitening with a high floor worth its share? (issue 47; BENCHMARKS.md, "Is a whitening with a high floor
worth its share?").  A diagnosis read on the test split; nothing was set from it.

    python benchmarks/investigations/diag_whiten_level.py tau                      # τ of every benchmark cell (plans only)
    python benchmarks/investigations/diag_whiten_level.py ab [--seeds 5] [--only defaults:vip_toy,...]
    python benchmarks/investigations/diag_whiten_level.py time EPS ARM             # one README digits process (ARM: today|drop)

* ``tau``: the whitening's floor τ = :func:`privlin.releases.scaling.rotation_floor` from each plan (N, d, k, ε, δ).
* ``ab``: per cell, the defaults as today, then with the plan's rule changed so that no whitening is made where
  τ ≥ ``--level`` (:func:`scaling.whitening_resolves` patched: the stage's share then goes to the moments), same keys.
* ``time``: the README example's fit (the `pixels` store's train split) in this process: first fit, best of 2 refits.
  Run it twice per arm with ``XDG_CACHE_HOME`` a fresh folder (cold), then the same folder (warm).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
warnings.simplefilter("ignore")
import numpy as np  # noqa: E402

import bench_defaults as bd  # noqa: E402
import bench_public as bp  # noqa: E402
import privlin  # noqa: E402
from privlin.plan import make_plan  # noqa: E402
from privlin.releases import scaling  # noqa: E402

CACHE = "/tmp/whiten/cache"  # bench_public's stores (featurize digits; the N = 1437 stores are the quickstart's)
SHAPES = {"bench_public pixels": (1149, 3072, 10), "bench_public vip_toy": (1149, 128, 10),
          "pixels": (1437, 3072, 10), "vip_toy": (1437, 128, 10), "iris": (120, 4, 3), "mix-a": (200, 8, 2),
          "mix-b": (2000, 64, 10), "mix-c": (20000, 512, 100), "mix-d": (200000, 128, 10), "mix-e": (5000, 4096, 2)}
CELLS = [("public", "pixels", (2.0, 4.0)), ("public", "vip_toy", (0.25, 0.5)),
         ("defaults", "pixels", (2.0, 4.0)), ("defaults", "vip_toy", (0.25, 0.5)),
         ("defaults", "iris", (1.0, 2.0, 4.0)), ("defaults", "mix-a", (0.5, 1.0, 2.0)), ("defaults", "mix-b", (0.25,))]
ORIGINAL = scaling.whitening_resolves


def rule(arm: str, level: float) -> None:
    """Today's rule, or no whitening where its floor is ≥ ``level`` (the plan then gives its share to the moments)."""
    scaling.whitening_resolves = ORIGINAL if arm == "today" else (
        lambda n, dim, s: ORIGINAL(n, dim, s) and scaling.rotation_floor(n, dim, s) < level)


def floor(n, d, k, eps):
    p = make_plan({"epsilon": eps, "delta": 1e-5}, n=n, dim=d, n_classes=k)
    return scaling.rotation_floor(n, p.model_dim, p.sigma_whiten) if p.whitened else None


def ab(seeds: int, level: float, only) -> None:
    for src, name, eps in CELLS:
        if only and f"{src}:{name}" not in only:
            continue
        if src == "defaults":
            _, Xtr, ytr, Xte, yte, k = bd.load_dataset(name, CACHE)
            n, d = Xtr.shape
        else:
            path = bp.with_public_split(bp.featurized(name, CACHE), os.path.join(CACHE, f"{name}_public_split.zarr"))
            (n, d), k = _shape(path), 10
        for arm in ("today", "drop"):
            rule(arm, level)
            accs = ({e: bd.privlin_accs(e, seeds, Xtr, ytr, Xte, yte, k) for e in eps} if src == "defaults"
                    else bp.accuracies(path, None, seeds, epsilons=eps)[0])
            for e in eps:
                print(json.dumps(dict(src=src, data=name, n=n, d=d, eps=e, arm=arm, floor=floor(n, d, k, e),
                                      accs=[float(a) for a in accs[e]])), flush=True)
        rule("today", level)


def _shape(path):
    import stores

    return tuple(stores.open(path)["train"].features.shape)


def timed(eps: float, arm: str, level: float) -> None:
    import stores

    X, y = stores.open(os.path.join(CACHE, "pixels_digits.zarr"))["train"].to_numpy()
    rule(arm, level)

    def fit():
        t = time.perf_counter()
        m = privlin.DPLinearClassifier(epsilon=eps, classes=range(10), random_state=0).fit(X, y)
        return time.perf_counter() - t, m

    first, m = fit()
    print(json.dumps(dict(eps=eps, arm=arm, whitened=m.plan_.whitened, first=first,
                          again=min(fit()[0] for _ in range(2)), load=os.getloadavg()[0])))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["tau", "ab", "time"])
    p.add_argument("args", nargs="*")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--level", type=float, default=0.15)
    p.add_argument("--only", default=None)
    a = p.parse_args(argv)
    os.environ.setdefault("PRIVLIN_LEDGER_HOME", os.path.join(CACHE, "ledger-home"))
    if a.mode == "tau":
        for name, (n, d, k) in SHAPES.items():
            for e in (0.25, 0.5, 1, 2, 4, 8):
                f = floor(n, d, k, e)
                print(f"{name:22} ε={e:<5} " + ("no whitening" if f is None else f"τ = {f:.3f}"))
    elif a.mode == "ab":
        ab(a.seeds, a.level, a.only.split(",") if a.only else None)
    else:
        timed(float(a.args[0]), a.args[1], a.level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
