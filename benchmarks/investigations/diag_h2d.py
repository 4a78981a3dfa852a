"""How fast a host block reaches the GPU, by route (issue 19: the warm-cache gap is the host-to-device copy).

    python benchmarks/investigations/diag_h2d.py [--mb 256] [--repeats 5]

Routes for one float16 block of ``--mb`` MB already in host memory, each the median of ``--repeats``:
``jnp.asarray`` of a pageable NumPy array (what the runner does), ``jax.device_put`` of the same, of a NumPy view
of page-locked memory (torch ``pin_memory``), through a ``pinned_host`` JAX array, split over threads, and a plain
host ``memcpy`` of the block as the host-side yardstick.
"""
from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]  # bench_sweep's timer
from bench_sweep import timed  # noqa: E402  warm-up, median


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    import jax
    import jax.numpy as jnp
    dev = jax.devices()[0]
    print("device", dev.platform, getattr(dev, "device_kind", ""), "jax", jax.__version__)
    rows = a.mb * 2**20 // (768 * 2)
    host = np.random.default_rng(0).standard_normal((rows, 768)).astype(np.float16)
    gb = host.nbytes / 1e9
    res = {}

    def report(name, fn):
        try:
            s = timed(fn, a.repeats)
            res[name] = s
            print(f"{name:48s} {s * 1e3:8.1f} ms  {gb / s:6.1f} GB/s", flush=True)
        except Exception as exc:  # noqa: BLE001 - a diagnostic: say which route failed and go on
            print(f"{name:48s} failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)

    dst = np.empty_like(host)
    report("host memcpy (np.copyto)", lambda: np.copyto(dst, host))
    report("jnp.asarray(pageable)", lambda: jnp.asarray(host).block_until_ready())
    report("jax.device_put(pageable)", lambda: jax.device_put(host, dev).block_until_ready())
    try:
        import torch
        pinned = torch.empty(host.shape, dtype=torch.float16, pin_memory=True).numpy()
        pinned[...] = host
        report("jax.device_put(torch-pinned numpy view)", lambda: jax.device_put(pinned, dev).block_until_ready())
        report("copy into pinned + device_put", lambda: (np.copyto(pinned, host),
                                                         jax.device_put(pinned, dev).block_until_ready()))
        th = torch.from_numpy(pinned)
        report("torch pinned .cuda() (yardstick)", lambda: (th.cuda(non_blocking=True), torch.cuda.synchronize()))
        from jax import dlpack as jdl
        report("torch pinned .cuda() -> jax dlpack", lambda: jdl.from_dlpack(th.cuda(non_blocking=True)).block_until_ready())
    except Exception as exc:  # noqa: BLE001
        print("torch routes failed:", exc)
    try:
        s_pinned = jax.sharding.SingleDeviceSharding(dev, memory_kind="pinned_host")
        s_dev = jax.sharding.SingleDeviceSharding(dev, memory_kind="device")
        ph = jax.device_put(host, s_pinned)
        ph.block_until_ready()
        report("pinned_host jax array -> device", lambda: jax.device_put(ph, s_dev).block_until_ready())
        report("numpy -> pinned_host -> device", lambda: jax.device_put(jax.device_put(host, s_pinned), s_dev).block_until_ready())
    except Exception as exc:  # noqa: BLE001
        print("memory kinds failed:", exc)
    for parts in (2, 4, 8):
        pool = ThreadPoolExecutor(parts)
        pieces = np.array_split(host, parts)

        def split(pieces=pieces, pool=pool):
            got = list(pool.map(lambda x: jax.device_put(x, dev), pieces))
            jax.block_until_ready(got)
            return jnp.concatenate(got)
        report(f"device_put in {parts} threads + concat", lambda: split().block_until_ready())

        def split_only(pieces=pieces, pool=pool):
            jax.block_until_ready(list(pool.map(lambda x: jax.device_put(x, dev), pieces)))
        report(f"device_put in {parts} threads (no concat)", split_only)
    f32 = jax.jit(lambda x: jnp.sum(x.astype(jnp.float32), axis=0))
    xd = jax.device_put(host, dev)
    report("device f16->f32 column sum (compute yardstick)", lambda: f32(xd).block_until_ready())


if __name__ == "__main__":
    main()
