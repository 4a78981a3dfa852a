"""``python -m experiments.eps_sweep`` reports a mistyped store path or split before it loads JAX: a typo
costs no seconds."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = """
import sys
from experiments import eps_sweep
code = eps_sweep.main([sys.argv[1], "--eps", "1", *sys.argv[2:]])
heavy = sorted(m for m in ("jax", "zarr", "torch", "privlin.runner") if m in sys.modules)
print(code, heavy)
"""


def test_a_missing_store_is_reported_before_jax_loads(tmp_path):
    missing = str(tmp_path / "feats.zarrr")
    done = subprocess.run([sys.executable, "-c", CHECK, missing], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert done.stdout.strip() == "2 []", (done.stdout, done.stderr)  # the error code, and nothing heavy loaded
    assert done.stderr.strip() == f"python -m experiments.eps_sweep: error: no feature store at {missing!r}"


def test_a_missing_split_is_reported_before_jax_loads(tmp_path, make_store, blobs):
    X, y = blobs(40, d=4, k=2, seed=1)
    make_store({"train": (X, y), "test": (X, y)})
    (store,) = map(str, tmp_path.glob("*.zarr"))
    done = subprocess.run([sys.executable, "-c", CHECK, store, "--split", "nosuch", "--no-progress"],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert done.stdout.strip() == "2 ['zarr']", (done.stdout, done.stderr)  # the store opened; JAX never loaded
    assert "--split 'nosuch': no such split" in done.stderr
