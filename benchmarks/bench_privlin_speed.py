"""privlin speed and memory, each number a ratio measured in the same run (machines are shared and noisy).

    python benchmarks/bench_privlin_speed.py [--quick] [--out benchmarks/results/privlin.md]

Rows:
1. ``adam1`` fit on a store vs one plain pass over the same store (blocks read as float32 and summed).
2. One full-batch DP-SGD step (clipped gradient sum + noise + momentum update) vs two plain GEMMs
   (``X W`` and ``X^T R``) on the same in-memory arrays.
3. Analytic clipping (``||x|| ||r||``, one GEMM) vs materialized per-example gradients with
   ``jax.vmap(jax.grad)`` (then clip and sum) at d=768, k=1000.  The analytic side runs at n=100k;
   materializing 100k × 768 × 1000 floats would need 307 GB, so the vmap side runs in chunks of 64 rows
   on ``n_mat`` rows and is scaled linearly to n (per-row cost is constant: no cross-row work).
4. Peak memory of ``privlin.fit`` (streaming: ``memory_limit=0``) on a store 4× larger than the
   memory it used, in a fresh subprocess (peak RSS minus RSS after imports and a warm-up fit).
Timings are the minimum of ``--repeats`` alternated runs after a warm-up (JIT compile excluded).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from _results import write_section  # noqa: E402  (benchmarks/ is sys.path[0] when run as a script)


def best_of(fns, repeats):
    """Alternate the callables ``repeats`` times; min wall time of each (after one warm-up call each)."""
    for f in fns:
        f()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for i, f in enumerate(fns):
            t = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t)
    return [min(t) for t in times]


def build_store(path, n, d, k, dtype="float16"):
    """A finalized split of n random rows (d features, k classes); stores over 2³¹ values rotate one random block
    per shard (the values do not change the work, and drawing them would take minutes)."""
    import stores

    rng = np.random.default_rng(0)
    w = stores.create_split(path, "train", n_rows=n, dim=d, dtype=dtype)
    big = n * d > 2**31
    base = rng.standard_normal((w.shard_bounds(0)[1], d), dtype=np.float32).astype(dtype) if big else None
    for i in w.pending():
        a, b = w.shard_bounds(i)
        X = np.roll(base[:b - a], 7 * i, axis=1) if big else rng.standard_normal((b - a, d), dtype=np.float32)
        w.write_shard(i, X, rng.integers(0, k, b - a), np.arange(a, b).astype(str))
    w.finalize()


def bench_adam1_vs_pass(tmp, n, d, k, repeats):
    import privlin
    import stores

    path = os.path.join(tmp, "adam1.zarr")
    build_store(path, n, d, k)
    sp = stores.open(path)["train"]

    def plain():
        s = np.zeros(d, np.float64)
        for X, _ in sp.blocks(rows=65536, dtype=np.float32):
            s += X.sum(axis=0)

    fit1 = lambda: privlin.fit(path, epsilon=1, method="adam1", center=False, classes=range(k), random_state=0)  # noqa: E731
    fit2 = lambda: privlin.fit(path, epsilon=1, method="adam1", classes=range(k), random_state=0)  # noqa: E731
    t_plain, t_fit, t_fit_c = best_of([plain, fit1, fit2], repeats)
    return [f"| adam1 fit vs one plain pass (store n={n}, d={d}, k={k}, float16) | {t_plain:.2f} s | "
            f"{t_fit:.2f} s | **{t_fit / t_plain:.2f}×** (goal ≤ 1.5×) |",
            f"| adam1 fit with private centering (2 passes) vs one plain pass | {t_plain:.2f} s | "
            f"{t_fit_c:.2f} s | **{t_fit_c / t_plain:.2f}×** |"]


def bench_step_vs_gemm(n, d, k, repeats):
    import jax
    import jax.numpy as jnp

    from privlin import train
    from privlin.noise import make_key

    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.standard_normal((n, d), dtype=np.float32))
    Y = jax.nn.one_hot(rng.integers(0, k, n), k)
    mask = jnp.ones(n)
    opt = train.make_optimizer("sgd", 0.1, momentum=0.9)
    state = train.init_state(d, k, opt)
    state = state._replace(params=state.params._replace(W=jnp.asarray(rng.standard_normal((d, k), np.float32) * .01)))

    @jax.jit
    def dp_step(state, key):
        g = train.clipped_grad_sum(state.params, X, Y, mask, 1.0, float(n))
        return train.noisy_update(state, g, key, 1.0, n, opt, clip=1.0)

    @jax.jit
    def gemms(W, R):
        return X @ W, X.T @ R

    R = jnp.asarray(rng.standard_normal((n, k), dtype=np.float32))
    key = make_key(0).key  # privlin's noise key (two threefry keys)
    t_dp, t_g = best_of([lambda: jax.block_until_ready(dp_step(state, key)),
                         lambda: jax.block_until_ready(gemms(state.params.W, R))], repeats)
    return [f"| full-batch DP-SGD step vs two plain GEMMs (n={n}, d={d}, k={k}) | {t_g * 1e3:.0f} ms | "
            f"{t_dp * 1e3:.0f} ms | **{t_dp / t_g:.2f}×** |"]


def bench_analytic_vs_vmap(n, d, k, n_mat, repeats):
    import jax
    import jax.numpy as jnp
    import optax

    from privlin import train

    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.standard_normal((n, d), dtype=np.float32))
    y = rng.integers(0, k, n)
    Y = jax.nn.one_hot(y, k)
    mask = jnp.ones(n)
    params = train.LinearParams(jnp.asarray(rng.standard_normal((d, k), np.float32) * 0.01), jnp.zeros(k))
    analytic = jax.jit(lambda p: train.clipped_grad_sum(p, X, Y, mask, 1.0, float(n)))

    def loss(p, x, yrow):
        return optax.softmax_cross_entropy(x @ p.W + p.b, yrow)

    @jax.jit
    def materialized_chunk(p, Xc, Yc):
        g = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(p, Xc, Yc)  # (c, d, k) per-example gradients
        norms = jnp.sqrt(jnp.sum(g.W**2, axis=(1, 2)))
        c = jnp.minimum(1.0, 1.0 / norms)
        return jnp.einsum("n,ndk->dk", c, g.W)

    chunk = 64

    def materialized():
        acc = jnp.zeros((d, k))
        for a in range(0, n_mat, chunk):
            acc = acc + materialized_chunk(params, X[a:a + chunk], Y[a:a + chunk])
        jax.block_until_ready(acc)

    # same answer on the rows both sides see
    ref = train.clipped_grad_sum(params, X[:n_mat], Y[:n_mat], mask[:n_mat], 1.0, float(n_mat)).W
    acc = sum(materialized_chunk(params, X[a:a + chunk], Y[a:a + chunk]) for a in range(0, n_mat, chunk))
    assert np.allclose(ref, acc, atol=1e-3), "analytic and materialized clipped sums differ"
    t_a, t_m = best_of([lambda: jax.block_until_ready(analytic(params)), materialized], repeats)
    t_m_full = t_m * n / n_mat
    return [f"| analytic clipping vs jax.vmap(grad) per-example grads (n={n}, d={d}, k={k}; vmap side timed on "
            f"{n_mat} rows in chunks of {chunk}, scaled ×{n // n_mat}) | {t_m_full:.1f} s (est.) | {t_a:.2f} s | "
            f"**{t_m_full / t_a:.0f}× faster** (goal ≥ 100×) |"]


MEMORY_CHILD = r"""
import json, os, resource, sys, numpy as np
sys.path.insert(0, %(root)r)
import privlin, stores, jax
path, k, method, limit = %(path)r, %(k)d, %(method)r, %(limit)d
def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
def peak_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) / 1024
kw = dict(epsilon=1, method=method, classes=range(k), random_state=0, memory_limit=limit, block_rows=8192,
          steps=None if method == "adam1" else 3)
small = %(small)r
privlin.fit(small, **kw)  # warm-up: imports, JIT compile on the same block shape
base = rss_mb()
# reset the high-water mark so the peak below is this fit's
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
except OSError:
    pass  # then the peak includes the (smaller) warm-up fit: an over-estimate
privlin.fit(path, **kw)
from privlin import data, runner
est = runner.in_memory_bytes(data.as_source(path, "train"), k) / 2**20
print(json.dumps({"base_mb": base, "peak_mb": peak_mb(), "estimate_mb": est}))
"""


def bench_memory(tmp, n, d, k):
    path = os.path.join(tmp, "big.zarr")
    small = os.path.join(tmp, "small.zarr")
    build_store(path, n, d, k)
    build_store(small, 16384, d, k)
    store_mb = n * d * 2 / 2**20
    rows = []
    for method in ("adam1", "sgd"):
        r = _memory_child(path, k, method, small, limit=0)
        used = r["peak_mb"] - r["base_mb"]
        rows.append(f"| peak memory of privlin.fit ({method}, streaming, block_rows=8192) on a {store_mb:.0f} MiB "
                    f"float16 store (n={n}, d={d}; {2 * store_mb:.0f} MiB as float32) | store {store_mb:.0f} MiB | "
                    f"+{used:.0f} MiB over {r['base_mb']:.0f} MiB after warm-up | "
                    f"**store = {store_mb / max(used, 1):.1f}× the memory used** |")
    # the in-memory path on a quarter of the rows: its real peak against what memory_limit is compared with
    quarter = os.path.join(tmp, "quarter.zarr")
    build_store(quarter, n // 4, d, k)
    r = _memory_child(quarter, k, "sgd", small, limit=2**40)
    used = r["peak_mb"] - r["base_mb"]
    rows.append(f"| in-memory fit (sgd) on {n // 4} × {d} float16 rows: measured peak vs "
                f"`runner.in_memory_bytes` (what `memory_limit` is compared with) | estimate {r['estimate_mb']:.0f} MiB"
                f" | +{used:.0f} MiB over {r['base_mb']:.0f} MiB | **peak = {used / r['estimate_mb']:.2f}× the "
                f"estimate** |")
    return rows


def _memory_child(path, k, method, small, *, limit):
    """Run MEMORY_CHILD in a fresh process (its own peak RSS) and return its JSON line."""
    code = MEMORY_CHILD % dict(root=ROOT, path=path, k=k, method=method, small=small, limit=limit)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "privlin.md"))
    args = p.parse_args(argv)
    from privlin import sensitivity

    q = args.quick
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in [
            ("adam1", lambda: bench_adam1_vs_pass(tmp, 20_000 if q else 200_000, 768, 100, args.repeats)),
            ("step", lambda: bench_step_vs_gemm(10_000 if q else 100_000, 768, 100, args.repeats)),
            ("clip", lambda: bench_analytic_vs_vmap(10_000 if q else 100_000, 768, 1000, 256 if q else 1024,
                                                    args.repeats)),
            ("memory", lambda: bench_memory(tmp, 50_000 if q else 640_000, 768, 100)),
        ]:
            t = time.time()
            with sensitivity.x64():  # privlin's exact sums are traced with float64 on, as the runner does
                new = fn()
            rows += new
            print("\n".join(new), f"({name}: {time.time() - t:.0f}s)", flush=True)
    text = ("### privlin: speed and memory (ratios within one run; 2-core CPU, shared)\n\n"
            "| what | baseline | privlin | ratio |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
    write_section(args.out, "bench_privlin_speed", text)
    print(text)


if __name__ == "__main__":
    main()
