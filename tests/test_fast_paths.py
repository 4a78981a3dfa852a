"""A wrong path typed to ``featurize`` (a data folder, an empty webdataset, a missing weights file) is answered like a
typo: one line, exit 2, before torch, timm or zarr load, within a second of ``main`` being called."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("torch", "timm", "zarr", "jax", "torchvision")

CASES = [
    ("--backbone pixels --dataset imagefolder:MISSING", "imagefolder:MISSING: folder 'MISSING' does not exist"),
    ("--backbone pixels --dataset webdataset --data-dir MISSING", "webdataset: folder 'MISSING' does not exist"),
    ("--backbone pixels --dataset webdataset --data-dir EMPTY", "webdataset: no .tar shards under 'EMPTY'"),
    ("--backbone pixels --dataset cifar10", "dataset 'cifar10' needs --data-dir"),
    ("--backbone vip_base --dataset digits", "no weights for backbone 'vip_base': put 'ckpt-vip-laion233m-base.pth'"),
    ("--backbone vip_toy --dataset digits --weights MISSING", "weights file 'MISSING' for backbone 'vip_toy' does not"),
    ("--backbone pixels --dataset digits --weights EMPTY", "backbone 'pixels' takes no weights"),
]


@pytest.mark.parametrize("args, says", CASES, ids=[c[0] for c in CASES])
def test_a_wrong_path_is_answered_before_the_heavy_imports(args, says, tmp_path):
    paths = {"MISSING": str(tmp_path / "missing"), "EMPTY": str(tmp_path / "empty")}
    os.mkdir(paths["EMPTY"])
    argv = [next((w.replace(k, v) for k, v in paths.items() if k in w), w) for w in args.split()]
    code = (f"import sys, time\nfrom featurize.__main__ import main\nt = time.perf_counter()\nrc = main({argv!r})\n"
            f"print(rc, round(time.perf_counter() - t, 3), sorted(m for m in {HEAVY!r} if m in sys.modules))")
    env = {k: v for k, v in os.environ.items() if k != "PRIVLIN_WEIGHTS_DIR"}
    r = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                       timeout=300)
    rc, seconds, heavy = r.stdout.split(" ", 2)
    assert rc == "2" and heavy.strip() == "[]", (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("featurize: error: "), r.stderr
    said = says
    for k, v in paths.items():
        said = said.replace(k, v)
    assert said in r.stderr, r.stderr
    assert float(seconds) < 1.0, seconds
