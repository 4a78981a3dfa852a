"""The in-memory fit program's cost and speed, for one restructuring to compare against another (issue 46).

Prints, for an adam1, a centered sgd and a minibatch plan (8 192 rows of dimension 256, k = 10, ε = 2), XLA's cost
analysis of the compiled program that runs them (``privlin.in_memory.train_many``, ``privlin.runner._train_many``
in a tree before the runner's split: flops, bytes accessed, transcendentals) and the median wall time of calling
it, compiled, on random rows.  Run it in each tree with its own ``PYTHONPATH``; ``--both OLD NEW`` runs the two
trees alternately in one sitting and prints the ratio::

    PYTHONPATH=$PWD python benchmarks/bench_fit_program.py
    python benchmarks/bench_fit_program.py --both /work/main /work/wt/runner --rounds 3

Results: BENCHMARKS.md, "The fit program before and after the runner's split".
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

N, D, K = 8192, 256, 10
PLANS = {
    "adam1": dict(method="adam1"),
    "sgd centered": dict(method="sgd", center=True, steps=30),
    "minibatch": dict(method="minibatch", steps=30, batch_size=1024),
}


def measure(repeats: int) -> dict:
    """{plan: {flops, bytes, transcendentals, seconds}} of this tree's fit program."""
    warnings.simplefilter("ignore")
    import jax
    import jax.numpy as jnp
    import numpy as np

    from privlin import noise, runner, sensitivity
    try:  # the runner split by job (issue 46)
        from privlin import fit_groups, in_memory, rows
        program, dynamic = in_memory.train_many, fit_groups.dynamic_arguments
        padded = rows.padded_len(rows.loaded_len(N))
    except ImportError:
        program, padded, dynamic = runner._train_many, runner._padded_len(runner._loaded_len(N)), runner._dynamic
    from privlin.estimator import DPLinearClassifier
    from privlin.plan import make_plan

    rng = np.random.default_rng(0)
    out = {}
    for name, kw in PLANS.items():
        est = DPLinearClassifier(epsilon=2.0, classes=list(range(K)), random_state=0, **kw)
        p = make_plan(est.get_params(), n=N, dim=D, n_classes=K)
        with sensitivity.x64():
            m = padded
            X = jnp.asarray(rng.standard_normal((m, D)), jnp.float16)
            idx = jnp.asarray(rng.integers(0, K, m), jnp.int32)
            mask = jnp.ones(m, jnp.float32)
            dyn = [jnp.asarray([v[0]], jnp.float32) for v in dynamic([p])]
            keys = jnp.stack([noise.make_key(0).key])
            args = (p.static(), X, idx, mask, float(N), keys, *dyn)
            compiled = program.lower(*args, k=K).compile()
            cost = compiled.cost_analysis()
            cost = cost[0] if isinstance(cost, (list, tuple)) else cost
            jax.block_until_ready(compiled(*args[1:]))
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                jax.block_until_ready(compiled(*args[1:]))
                times.append(time.perf_counter() - t)
        out[name] = dict(flops=cost.get("flops", 0.0), bytes=cost.get("bytes accessed", 0.0),
                         transcendentals=cost.get("transcendentals", 0.0), seconds=float(np.median(times)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--both", nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not a.both:
        got = measure(a.repeats)
        if a.json:
            print(json.dumps(got))
            return
        for name, r in got.items():
            print(f"{name:13s} flops {r['flops']:.6e} bytes {r['bytes']:.6e} transc {r['transcendentals']:.6e} "
                  f"median {r['seconds'] * 1e3:.1f} ms")
        return
    runs: dict = {tree: [] for tree in a.both}
    for _ in range(a.rounds):  # alternate, so a busy machine slows both alike
        for tree in a.both:
            cmd = [sys.executable, os.path.abspath(__file__), "--json", "--repeats", str(a.repeats)]
            res = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tree,
                                 env={**os.environ, "PYTHONPATH": tree})
            runs[tree].append(json.loads(res.stdout.strip().splitlines()[-1]))
    old, new = a.both
    for name in PLANS:
        o = min(r[name]["seconds"] for r in runs[old])
        n = min(r[name]["seconds"] for r in runs[new])
        same = all(runs[old][0][name][f] == runs[new][0][name][f] for f in ("flops", "bytes", "transcendentals"))
        print(f"{name:13s} old {o * 1e3:7.1f} ms  new {n * 1e3:7.1f} ms  new/old {n / o:.3f}  "
              f"cost analysis {'equal' if same else 'DIFFERS'}: flops {runs[new][0][name]['flops']:.6e} "
              f"bytes {runs[new][0][name]['bytes']:.6e}")


if __name__ == "__main__":
    main()
