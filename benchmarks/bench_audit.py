"""Privacy benchmarks: audit wall time, and the cost of secure_mode noise, in one run.

    python benchmarks/bench_audit.py [--runs 1000] [--rows 100000] [--dim 768] [--classes 1000] [--repeats 3]

1. Canary audit of 1000 runs on digits (1797 x 64, 10 classes) for each method
   in ``privlin.audit.AUDITS``: wall seconds (compile included) and the bound.
2. secure_mode noise vs plain noise on a full-batch fit of ``rows x dim x classes``
   (clip rows, per-class clipped sums, noise on the (classes, dim) statistic,
   one Adam step from zero): the ratio of whole-fit times, plus the noise alone.
   Plain noise is ``jax.random.normal``; secure noise is the discrete Gaussian
   on a 2^-30 grid from os.urandom (``privlin.secure_noise``).

Rows are appended to ``benchmarks/results/privacy.md``. Timings on a shared
machine are noisy: read the ratios, not the seconds.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from privlin import audit as A  # noqa: E402
from privlin import secure_noise  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "privacy.md")


def machine() -> str:
    return f"{os.cpu_count()}-core CPU, shared ({platform.machine()})"


def bench_audits(runs: int, epsilons) -> list[str]:
    rows = []
    for method in sorted(A.AUDITS):
        for eps in epsilons:
            t = time.perf_counter()
            res = A.audit_method(method, eps, runs=runs)
            wall = time.perf_counter() - t
            rows.append(f"| audit `{method}` ε={eps:g}, {runs} runs on digits | {wall:.2f} s "
                        f"(train {res.details['train_seconds']:.2f} s) | lower bound ε≥{res.epsilon_lb:.2f} | {machine()} |")
            print(rows[-1], flush=True)
    return rows


def _stat(X, y, K, C=1.0):
    norms = jnp.linalg.norm(X, axis=1, keepdims=True)
    Xc = X * jnp.minimum(1.0, C / jnp.maximum(norms, 1e-12))
    return jax.ops.segment_sum(Xc, y, num_segments=K)


def _adam_step(g, lr=1.0, eps=1e-8):
    m, v = 0.1 * g, 0.001 * g * g
    return -lr * (m / 0.1) / (jnp.sqrt(v / 0.001) + eps)


def bench_noise(n, d, K, repeats) -> list[str]:
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.standard_normal((n, d), dtype=np.float32))
    y = jnp.asarray(rng.integers(0, K, n).astype(np.int32))
    sigma, C = 2.0, 1.0
    stat = jax.jit(_stat, static_argnums=2)
    step = jax.jit(_adam_step)
    plain_noise = jax.jit(lambda k: sigma * C * jax.random.normal(k, (K, d), jnp.float32))

    def fit_plain(key):
        s = stat(X, y, K)
        return step(s + plain_noise(key)).block_until_ready()

    def fit_secure(_):
        s = np.asarray(stat(X, y, K))
        noisy = secure_noise.secure_gaussian_release(s, sigma * C, C)
        return step(jnp.asarray(noisy, jnp.float32)).block_until_ready()

    def noise_plain(key):
        return plain_noise(key).block_until_ready()

    def noise_secure(_):
        return secure_noise.secure_gaussian_release(np.zeros((K, d)), sigma * C, C)

    key = jax.random.key(0)
    times = {}
    for name, f in [("fit_plain", fit_plain), ("fit_secure", fit_secure),
                    ("noise_plain", noise_plain), ("noise_secure", noise_secure)]:
        f(key)  # compile / warm
    for _ in range(repeats):  # alternate so that machine load hits both alike
        for name, f in [("fit_plain", fit_plain), ("fit_secure", fit_secure),
                        ("noise_plain", noise_plain), ("noise_secure", noise_secure)]:
            t = time.perf_counter()
            f(key)
            times.setdefault(name, []).append(time.perf_counter() - t)
    med = {k: float(np.median(v)) for k, v in times.items()}
    rows = [
        f"| secure_mode fit vs plain fit, {n // 1000}k × {d} × {K} (full batch, 1 step) | "
        f"{med['fit_secure']:.2f} s vs {med['fit_plain']:.2f} s | **ratio {med['fit_secure'] / med['fit_plain']:.2f}×** | {machine()} |",
        f"| secure_mode noise alone, {K} × {d} draws | {med['noise_secure'] * 1e3:.0f} ms vs {med['noise_plain'] * 1e3:.1f} ms "
        f"| ratio {med['noise_secure'] / med['noise_plain']:.1f}× | {machine()} |",
    ]
    for r in rows:
        print(r, flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--epsilon", type=float, nargs="+", default=[1.0, 8.0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    rows = bench_audits(args.runs, args.epsilon) + bench_noise(args.rows, args.dim, args.classes, args.repeats)
    if not args.no_write:
        os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
        new = not os.path.exists(RESULTS)
        with open(RESULTS, "a", encoding="utf-8") as fh:
            if new:
                fh.write("## Privacy: audits and secure_mode noise (`benchmarks/bench_audit.py`)\n\n"
                         "| what | time | result | machine |\n|---|---|---|---|\n")
            fh.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
