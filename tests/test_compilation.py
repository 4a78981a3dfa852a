"""Compile once (issue 37.1): the persistent compilation cache a second process loads, and one program per ε grid.

The suite itself caches in ``.pytest_cache/jax`` (conftest sets ``JAX_COMPILATION_CACHE_DIR``, which privlin must
honour); the subprocesses here unset it and point ``XDG_CACHE_HOME`` at ``tmp_path``, so the real home is never
written.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: A small seeded fit that prints the persistent cache's hits and misses (JAX's monitoring events), the directory
#: privlin cached in, and the fit's key words and first row (what the cache must not hold).
FIT = r"""
import json, sys
import jax, numpy as np
counts = {"hits": 0, "misses": 0}
def listen(event, **kw):
    if event == "/jax/compilation_cache/cache_hits": counts["hits"] += 1
    if event == "/jax/compilation_cache/cache_misses": counts["misses"] += 1
jax.monitoring.register_event_listener(listen)
from privlin import DPLinearClassifier, compilation, noise
rng = np.random.default_rng(5)
X = (rng.normal(size=(300, 5)) + 3.25).astype(np.float32); y = (X[:, 0] > 3.25).astype(int)
m = DPLinearClassifier(epsilon=2.0, classes=[0, 1], method="adam1", random_state=987654321).fit(X, y)
key = noise.key_data(noise.make_key(987654321).key)
acc = float(np.mean(m.predict(X) == y))
print(json.dumps({**counts, "dir": compilation.cache_dir(), "key": key.tolist(), "row": X[0].tolist(), "acc": acc}))
"""


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE",
                                                                      "PRIVLIN_COMPILATION"))}
    # XLA_FLAGS="": users' optimized compile, which the rest of the suite skips (conftest): exercised here once
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", XLA_FLAGS="",
               **extra)
    return env


def _run(code, env):
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _entries(where: Path) -> dict[str, bytes]:
    """Every cache entry, decompressed (the serialized executables)."""
    from jax._src import compilation_cache as cc

    return {p.name: cc.decompress_executable(p.read_bytes()) for p in where.iterdir() if p.name.endswith("-cache")}


def test_a_second_process_loads_every_program_from_the_default_cache_and_it_holds_no_key_or_row(tmp_path):
    env = _env(tmp_path)
    first = _run(FIT, env)
    where = tmp_path / "xdg" / "privlin" / "jax"
    assert first["dir"] == str(where)
    entries = _entries(where)
    assert first["misses"] > 0 and len(entries) >= first["misses"] > 0
    assert any(name.startswith("jit__train_many-") for name in entries)  # the fit program itself
    second = _run(FIT, env)
    assert second["misses"] == 0 and second["hits"] >= first["misses"], (first, second)  # nothing compiled again
    assert first["acc"] == second["acc"] > 0.7  # the loaded program computes what the compiled one did (seeded)
    assert len(_entries(where)) == len(entries)
    # rows, keys and noise are arguments of the programs, never constants folded into them
    secrets = [np.asarray(first["key"], np.uint32).reshape(-1, 2)[i].tobytes() for i in range(2)]
    secrets.append(np.asarray(first["row"], np.float32).tobytes())
    for name, blob in entries.items():
        for s in secrets:
            assert s not in blob, f"{name} holds a key or a row"


def test_off_switch_and_a_users_own_cache_dir(tmp_path):
    code = ("import json; from privlin import compilation; d = compilation.enable(); "
            "print(json.dumps({'dir': d}))")
    assert _run(code, _env(tmp_path, PRIVLIN_COMPILATION_CACHE="0"))["dir"] is None
    mine = str(tmp_path / "mine")
    assert _run(code, _env(tmp_path, JAX_COMPILATION_CACHE_DIR=mine))["dir"] == mine
    assert not (tmp_path / "xdg").exists()  # privlin made no cache of its own beside the user's
    # in this process: conftest configured JAX's cache, and privlin leaves it alone
    from privlin import compilation

    assert compilation.enable() == os.environ["JAX_COMPILATION_CACHE_DIR"]


def test_estimator_epsilon_grid_and_cross_validation_compile_the_fit_once(blobs):
    """DPLinearClassifier fits at 3 ε and a 3-fold cross_val_score reuse one compiled fit program (ε, σ, the
    learning rate, the key are arguments; the folds' N share one padded shape); counted as tests/test_runner.py
    counts them, with jit's own cache of ``runner._train_many``."""
    from sklearn.model_selection import cross_val_score

    from privlin import DPLinearClassifier, runner
    from privlin.plan import make_plan

    X, y = blobs(450, d=6, k=3, seed=13)
    params = {"method": "adam1", "classes": [0, 1, 2], "random_state": 0}
    eps = (2.0, 4.0, 8.0)
    # the defaults at these ε make the same releases (at ε=1 they add a re-centering: another program, by design)
    statics = {make_plan({**params, "epsilon": e}, n=n, dim=6, n_classes=3).static()
               for e in eps for n in (300, 450)}
    assert len(statics) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        DPLinearClassifier(epsilon=eps[0], **params).fit(X, y)
        before = runner._train_many._cache_size()
        for e in eps[1:]:
            DPLinearClassifier(epsilon=e, **params).fit(X, y)
        scores = cross_val_score(DPLinearClassifier(epsilon=eps[1], **params), X, y, cv=3)
    assert runner._train_many._cache_size() == before
    assert len(scores) == 3 and np.all(np.isfinite(scores))


def test_where_a_refit_at_another_epsilon_compiles_again():
    """The default chain at ε=1 adds a re-centering release that ε=2 does not make on breast_cancer-size data: a
    different program, by the rule that a program depends on which releases are made (BENCHMARKS.md reports
    both refits)."""
    from privlin.plan import make_plan

    a, b = (make_plan({"epsilon": e}, n=569, dim=30, n_classes=2).static() for e in (1.0, 2.0))
    names = lambda s: [r.name for r, _ in s.chain]  # noqa: E731
    assert "recenter" in names(a) and "recenter" not in names(b)
    assert a._replace(chain=()) == b._replace(chain=())  # everything else static is the same
