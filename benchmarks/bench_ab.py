"""Before/after timing of privlin fits through the public API only, so the same script runs in any tree (an old
commit's checkout too): min of R runs after a warm-up that compiles, printed per fit and as one JSON line.

    cd OLD_TREE && PYTHONPATH=$PWD python /path/to/bench_ab.py N D K R     # e.g. 30000 512 10 2
"""
import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
for name in ("n", "d", "k", "repeats"):
    p.add_argument(name, type=int)
args = p.parse_args()
sys.path.insert(0, os.getcwd())
warnings.simplefilter("ignore")
from privlin import DPLinearClassifier  # noqa: E402  (the tree in the working directory)
from privlin.sweep import sweep  # noqa: E402

n, d, k, R = args.n, args.d, args.k, args.repeats
rng = np.random.default_rng(0)
C = rng.normal(size=(k, d)).astype(np.float32)
y = rng.integers(0, k, n)
X = (C[y] + rng.normal(size=(n, d)).astype(np.float32) * 2).astype(np.float16)
cls = list(range(k))
cases = {
    "adam1 in memory": lambda: DPLinearClassifier(epsilon=2.0, method="adam1", classes=cls, random_state=0).fit(X, y),
    "sgd in memory": lambda: DPLinearClassifier(epsilon=2.0, method="sgd", classes=cls, random_state=0).fit(X, y),
    "adam1 streamed": lambda: DPLinearClassifier(epsilon=2.0, method="adam1", classes=cls, random_state=0, memory_limit=0).fit(X, y),
    "sgd streamed (20 steps)": lambda: DPLinearClassifier(epsilon=2.0, method="sgd", steps=20, classes=cls, random_state=0, memory_limit=0).fit(X, y),
    "adam1 10-eps sweep": lambda: sweep((X, y), epsilon=[0.25, 0.5, 1, 2, 3, 4, 6, 8, 12, 16], method="adam1", classes=cls, random_state=0, eval_split=None, progress=False),
}
out = {}
for name, f in cases.items():
    f()  # warm-up (compile)
    ts = []
    for _ in range(R):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    out[name] = min(ts)
    print(f"{name}: {min(ts):.3f} s", flush=True)
print(json.dumps(out))
