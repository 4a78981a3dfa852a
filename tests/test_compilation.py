"""Compile once: the persistent compilation cache a second process loads, the fit program stored whole
(``privlin.compilation.call``: loaded untraced, rebuilt when damaged, bit-identical), and one program per ε grid.

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
traced = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, s, **kw: traced.append(kw.get("fun_name")) if event.endswith("jaxpr_trace_duration") else None)
from privlin import DPLinearClassifier, compilation, defaults, noise
defaults.QUICK_COMPILE_ELEMENTS = 0  # XLA's optimized compile (a large fit's), which the rest of the suite skips
rng = np.random.default_rng(5)
X = (rng.normal(size=(300, 5)) + 3.25).astype(np.float32); y = (X[:, 0] > 3.25).astype(int)
m = DPLinearClassifier(epsilon=2.0, classes=[0, 1], method="adam1", random_state=987654321).fit(X, y)
key = noise.key_data(noise.make_key(987654321).key)
acc = float(np.mean(m.predict(X) == y))
print(json.dumps({**counts, "dir": compilation.cache_dir(), "key": key.tolist(), "row": X[0].tolist(), "acc": acc,
                  "W": np.asarray(m.coef_transformed_).tobytes().hex(), "stats": dict(compilation.STATS),
                  "traced": [str(f) for f in traced]}))
"""


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE",
                                                                      "PRIVLIN_COMPILATION"))}
    # XLA_FLAGS="": users' compile options, not the suite's (conftest)
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
    assert any(name.startswith("jit_train_many-") for name in entries)  # the fit program itself
    from privlin import compilation

    programs = {p.name: compilation._unpack(p.read_bytes(), p.name) for p in _programs(where / "programs")}
    assert first["stats"] == {"built": 1} and len(programs) == 1  # the fit program, whole
    assert "train_many" in first["traced"]
    second = _run(FIT, env)
    # nothing compiled again; the fit program loaded whole, not even traced (its form's alias names it)
    assert second["misses"] == 0 and second["stats"] == {"loaded": 1}, (first, second)
    assert "train_many" not in second["traced"] and len(second["traced"]) < len(first["traced"])
    assert second["hits"] + 1 >= first["misses"], (first, second)
    assert first["W"] == second["W"] and first["acc"] == second["acc"] > 0.7  # bit for bit (seeded)
    assert len(_entries(where)) == len(entries)
    assert {p.name for p in _programs(where / "programs")} == set(programs)
    # rows, keys and noise are arguments of the programs, never constants folded into them
    secrets = [np.asarray(first["key"], np.uint32).reshape(-1, 2)[i].tobytes() for i in range(2)]
    secrets.append(np.asarray(first["row"], np.float32).tobytes())
    for name, blob in {**entries, **programs}.items():
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
    """DPLinearClassifier fits at 3 ε and a 5-fold cross_val_score reuse one compiled fit program (ε, σ, the
    learning rate, the key are arguments; the folds' N, 400, and the whole set's, 500, share one padded shape,
    512: :func:`privlin.rows.loaded_len`); counted as tests/test_runner.py
    counts them: the programs :func:`privlin.compilation.call` built or loaded, and jit's own cache of
    ``in_memory.train_many`` (which ``call`` does not fill: it lowers and compiles the program itself)."""
    from sklearn.model_selection import cross_val_score

    from privlin import DPLinearClassifier, compilation, in_memory
    from privlin.plan import make_plan

    X, y = blobs(500, d=6, k=3, seed=13)
    params = {"method": "adam1", "classes": [0, 1, 2], "random_state": 0}
    eps = (2.0, 4.0, 8.0)
    # the defaults at these ε make the same releases (at ε=1 they add a re-centering: another program, by design)
    statics = {make_plan({**params, "epsilon": e}, n=n, dim=6, n_classes=3).static()
               for e in eps for n in (400, 500)}
    assert len(statics) == 1
    programs = lambda: compilation.STATS["built"] + compilation.STATS["loaded"]  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        DPLinearClassifier(epsilon=eps[0], **params).fit(X, y)
        before, traced = programs(), in_memory.train_many._cache_size()
        for e in eps[1:]:
            DPLinearClassifier(epsilon=e, **params).fit(X, y)
        scores = cross_val_score(DPLinearClassifier(epsilon=eps[1], **params), X, y, cv=5)
    assert programs() == before and in_memory.train_many._cache_size() == traced
    assert len(scores) == 5 and np.all(np.isfinite(scores))


def test_where_a_refit_at_another_epsilon_compiles_again():
    """The default chain at ε=1 adds a re-centering release that ε=2 does not make on breast_cancer-size data: two
    plans' statics; on rows too many for the quick compile they are two programs (BENCHMARKS.md reports both
    refits), on fewer one (:func:`privlin.fit_groups.with_rounds`, next test)."""
    from privlin import fit_groups
    from privlin.plan import make_plan

    a, b = (make_plan({"epsilon": e}, n=569, dim=30, n_classes=2).static() for e in (1.0, 2.0))
    names = lambda s: [r.name for r, _ in s.chain]  # noqa: E731
    assert "recenter" in names(a) and "recenter" not in names(b)
    assert a._replace(chain=()) == b._replace(chain=())  # everything else static is the same
    assert fit_groups.shared_form(a) != fit_groups.shared_form(b)
    assert fit_groups.shared_form(a, True) == fit_groups.shared_form(b, True)


def test_fits_at_epsilon_1_and_2_of_one_small_shape_compile_once(monkeypatch):
    """On breast_cancer (569 × 30), ε = 1 (re-centering rounds) and ε = 2, 4 (none) run one fit program: the refits
    build and load nothing.  In it, the ε = 2 plan passes over the rounds: its released centering is bitwise the one
    of its own program (exact sums of the same rows, the same noise), its weights equal up to float32 rounding (XLA
    fuses the float32 row normalizations of another program differently: last bits)."""
    from sklearn.datasets import load_breast_cancer

    from privlin import DPLinearClassifier, compilation, fit_groups

    X, y = load_breast_cancer(return_X_y=True)
    programs = lambda: compilation.STATS["built"] + compilation.STATS["loaded"]  # noqa: E731

    def fit(eps):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return DPLinearClassifier(epsilon=eps, classes=[0, 1], random_state=11).fit(X, y)

    first = fit(1.0)
    before = programs()
    shared = {eps: fit(eps) for eps in (2.0, 4.0)}
    assert programs() == before
    assert first.released_["center"].shape[0] == 3  # the rounds' means, then the centering's
    assert fit_groups.recenter_ratios([first.plan_, shared[2.0].plan_]) == [first.plan_.static().chain[1][1], -1.0]
    monkeypatch.setattr(fit_groups, "shares_rounds", lambda source: False)
    for eps, m in shared.items():
        own = fit(eps)
        assert "recenter" not in m.released_ and m.released_["center"].shape == own.released_["center"].shape
        assert np.array_equal(m.released_["center"], own.released_["center"])
        np.testing.assert_allclose(m.coef_transformed_, own.coef_transformed_, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(m.intercept_transformed_, own.intercept_transformed_, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- the stored programs, in this process

def _fit(X, y):
    from privlin import DPLinearClassifier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = DPLinearClassifier(epsilon=2.0, classes=[0, 1, 2], method="adam1", random_state=7).fit(X, y)
    return np.asarray(m.coef_transformed_).tobytes() + np.asarray(m.intercept_transformed_).tobytes()


def _programs(where: Path) -> list[Path]:
    """The program files in ``where`` (not the forms' aliases, not a temporary file)."""
    return [p for p in where.iterdir() if not p.name.startswith(("form-", "."))]


def _fresh(monkeypatch, where):
    """A new process's view: no program in memory, programs stored in ``where`` (None: none stored)."""
    from privlin import compilation

    monkeypatch.setattr(compilation, "_programs", {})
    monkeypatch.setattr(compilation, "programs_dir", lambda: where)


def test_a_stored_program_gives_the_same_bits_and_a_damaged_one_is_rebuilt(tmp_path, monkeypatch, blobs):
    """Without the store, built and stored, loaded: bit-identical fits.  A flipped byte, a truncated file, another
    format's file and another program's file (a valid checksum under another key) are each detected, rebuilt
    (counted) and replaced; the fit gives the same bits and never fails."""
    import hashlib

    from privlin import compilation

    X, y = blobs(120, d=5, k=3, seed=3)
    _fresh(monkeypatch, None)
    reference = _fit(X, y)
    _fresh(monkeypatch, tmp_path)
    built = compilation.STATS["built"]
    assert _fit(X, y) == reference and compilation.STATS["built"] == built + 1  # built and stored
    (path,) = _programs(tmp_path)
    good = path.read_bytes()
    _fresh(monkeypatch, tmp_path)
    loaded = compilation.STATS["loaded"]
    assert _fit(X, y) == reference and compilation.STATS["loaded"] == loaded + 1  # loaded whole, same bits
    n = len(compilation._MAGIC)
    other_key = hashlib.sha256(b"another program").hexdigest().encode()
    payload = good[n + 96:]
    faults = {
        "flipped byte": good[:len(good) // 2] + bytes([good[len(good) // 2] ^ 1]) + good[len(good) // 2 + 1:],
        "truncated": good[:len(good) // 3],
        "another format": b"privlin-program-1\n" + good[n:],
        "another program's file": (compilation._MAGIC + other_key + hashlib.sha256(other_key + payload).digest()
                                   + payload),
    }
    for fault, damaged in faults.items():
        path.write_bytes(damaged)
        _fresh(monkeypatch, tmp_path)
        rebuilt, built = compilation.STATS["rebuilt"], compilation.STATS["built"]
        assert _fit(X, y) == reference, fault
        assert (compilation.STATS["rebuilt"], compilation.STATS["built"]) == (rebuilt + 1, built + 1), fault
        assert path.read_bytes()[n:n + 64] == path.name.encode(), fault  # replaced by a whole, valid file
    _fresh(monkeypatch, tmp_path)
    loaded = compilation.STATS["loaded"]
    assert _fit(X, y) == reference and compilation.STATS["loaded"] == loaded + 1


def test_an_edit_of_privlin_traces_the_program_again_and_finds_it_where_unchanged(tmp_path, monkeypatch, blobs):
    """The form's alias (named with privlin's source hash) skips tracing; after an edit the program is traced and
    named by its jaxpr, so an unchanged program is loaded, not rebuilt.  A damaged alias is a traced lookup."""
    from privlin import compilation

    X, y = blobs(120, d=5, k=3, seed=3)
    _fresh(monkeypatch, tmp_path)
    reference = _fit(X, y)
    (alias,) = tmp_path.glob("form-*")
    monkeypatch.setattr(compilation, "_source_hash", "privlin after an edit that leaves this program as it was")
    for damage in (None, b"privlin-form-1\n" + b"0" * 63 + b"x"):
        if damage is not None:
            alias.write_bytes(damage)
        _fresh(monkeypatch, tmp_path)
        built, loaded = compilation.STATS["built"], compilation.STATS["loaded"]
        assert _fit(X, y) == reference
        assert (compilation.STATS["built"], compilation.STATS["loaded"]) == (built, loaded + 1)
    assert len(list(tmp_path.glob("form-*"))) == 2 and len(_programs(tmp_path)) == 1


def test_a_stored_program_that_loads_but_cannot_run_is_rebuilt(tmp_path, monkeypatch, blobs):
    """XLA's CPU client re-serializes an executable it loaded (from JAX's cache, or from ``programs/``) without its
    kernels' code: stored so, it would load and then fail when run ("Function ... not found"); privlin stores only
    executables it compiled.  Here such a broken program is stored by hand (a loaded one stored again); the next
    process's fit detects it when it runs, rebuilds it, and gives the same bits."""
    from privlin import compilation

    X, y = blobs(120, d=5, k=3, seed=3)
    _fresh(monkeypatch, tmp_path)
    reference = _fit(X, y)
    (path,) = _programs(tmp_path)
    good = path.read_bytes()
    compilation._store(path, compilation._load(path))
    assert len(path.read_bytes()) < len(good)  # the kernels' code is missing
    _fresh(monkeypatch, tmp_path)
    rebuilt, loaded = compilation.STATS["rebuilt"], compilation.STATS["loaded"]
    assert _fit(X, y) == reference
    assert (compilation.STATS["rebuilt"], compilation.STATS["loaded"]) == (rebuilt + 1, loaded + 1)
    _fresh(monkeypatch, tmp_path)
    loaded = compilation.STATS["loaded"]
    assert _fit(X, y) == reference and compilation.STATS["loaded"] == loaded + 1  # the rebuilt one runs


def test_a_program_is_written_whole_or_not_at_all(tmp_path, monkeypatch, blobs):
    """A writer that dies before its rename leaves no file and no temporary behind; writers racing on one entry
    (threads here, processes alike: each writes its own temporary file) leave one complete, loadable copy."""
    import threading

    from privlin import compilation

    X, y = blobs(120, d=5, k=3, seed=3)
    _fresh(monkeypatch, tmp_path)
    _fit(X, y)
    (path,) = _programs(tmp_path)
    program = next(iter(compilation._programs.values()))
    path.unlink()

    def dies(*a, **k):
        raise OSError("killed")

    with monkeypatch.context() as m:
        m.setattr(compilation.os, "replace", dies)
        compilation._store(path, program)
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("form-")] == []
    writers = [threading.Thread(target=compilation._store, args=(path, program)) for _ in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("form-")] == [path.name]
    loaded = compilation.STATS["loaded"]
    assert compilation._load(path) is not None and compilation.STATS["loaded"] == loaded + 1


def test_the_program_key_holds_forms_never_values(monkeypatch):
    """The key changes with what the compiled code depends on (the program: a static argument, the code itself, a
    constant; a shape, a dtype, x64, XLA_FLAGS, the options), never with the values of traced arguments (rows,
    keys, σ)."""
    import functools

    import jax
    import jax.numpy as jnp

    from privlin import compilation

    @functools.partial(jax.jit, static_argnames=("s",))
    def f(rows, sigma, *, s):
        return rows * s + sigma

    @functools.partial(jax.jit, static_argnames=("s",))
    def g(rows, sigma, *, s):  # the same signature, another program
        return rows * s - sigma

    def key(fn=f, s=2.0, rows=None, sigma=1.0, options=None):
        rows = jnp.ones((4, 3), jnp.float32) if rows is None else rows
        return compilation.program_key(fn.trace(rows, jnp.float32(sigma), s=s), options or {})

    base = key()
    assert key(rows=jnp.full((4, 3), 7.0, jnp.float32), sigma=3.5) == base  # other values: the same program
    assert key(s=3.0) != base and key(fn=g) != base and key(rows=jnp.ones((8, 3), jnp.float32)) != base
    assert key(rows=jnp.ones((4, 3), jnp.float16)) != base and key(options={"a": 1}) != base
    with jax.enable_x64(True):
        assert key() != base
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_fast_math=false")
    assert key() != base
    monkeypatch.delenv("XLA_FLAGS")
    c = np.arange(3.0, dtype=np.float32)
    h = jax.jit(lambda rows, sigma: rows + jnp.asarray(c) + sigma)
    before = compilation.program_key(h.trace(jnp.ones((4, 3)), 1.0), {})
    c[0] = 9.0  # a constant of the program (not an argument): the key follows its value
    assert compilation.program_key(jax.jit(lambda rows, sigma: rows + jnp.asarray(c) + sigma).trace(
        jnp.ones((4, 3)), 1.0), {}) != before


def test_quick_compile_options_below_the_size_threshold_and_the_off_switch(monkeypatch):
    """Small programs compile with the quick options, larger ones with XLA's defaults (public shapes decide); an
    option XLA_FLAGS already sets is left to it.  ``PRIVLIN_COMPILATION_CACHE=0`` stores no program."""
    import jaxlib

    from privlin import compilation, defaults

    monkeypatch.setenv("XLA_FLAGS", "")
    quick = dict(compilation.QUICK_OPTIONS)
    if tuple(jaxlib.__version__.split(".")[:2]) != ("0", "10"):
        quick.pop("xla_cpu_use_fusion_emitters")
    small = np.zeros((defaults.QUICK_COMPILE_ELEMENTS // 4 - 1, 4), np.float32)
    assert compilation.compile_options((small, np.float32(1.0))) == quick
    large = np.zeros((defaults.QUICK_COMPILE_ELEMENTS // 4 + 1, 4), np.float32)
    assert compilation.compile_options((large,)) == {}
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=2")
    assert "xla_backend_optimization_level" not in compilation.compile_options((small,))
    # an XLA that lacks a quick option compiles with its defaults (here: an option no XLA has)
    monkeypatch.setattr(compilation, "QUICK_OPTIONS", {"xla_privlin_no_such_option": True})
    monkeypatch.setenv("XLA_FLAGS", "")
    assert compilation.compile_options((small,)) == {"xla_privlin_no_such_option": True}
    import jax

    f = jax.jit(lambda a: a * 2.0)
    assert float(compilation.call(f, (), np.float32(3.0))) == 6.0
    assert compilation.programs_dir() is not None  # the suite's cache (conftest)
    monkeypatch.setenv(compilation.ENV, "0")
    assert compilation.programs_dir() is None
