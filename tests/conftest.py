"""Test configuration: make the repository importable without installing it."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# JAX on CPU only, and quiet: the suite must run on a 2-core machine with no accelerator.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Compiled programs cached on disk (for this run, and later runs of this checkout): the same pipelines compile in
# many tests and again in the subprocesses of the CLI, distributed, device and README tests (-23% CPU time on
# those tests from an empty cache). Test data are synthetic or public, so a constant folded into a program is too.
# The README's two pytest-xdist workers share this folder, as the tests' subprocesses always did: privlin writes
# ``programs/`` files whole (renamed into place); JAX writes an entry in place, and an entry read half-written fails
# to load and is compiled again, with a warning.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(ROOT, ".pytest_cache", "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")


def _test_xla_flags() -> str:
    """XLA compiles the tests' programs for compile time, not run time: they are compiled once or a few times for
    small data, so compiling dominates the suite.  LLVM at -O0 and XLA's loop emitters instead of its newer fusion
    emitters: the same HLO, the same float semantics (no fast math either way), much less CPU time on the
    compile-heavy files (BENCHMARKS.md).  The fusion-emitter switch is only set on jaxlib 0.10, where the flag
    exists (an unknown XLA flag aborts the process).
    Set XLA_FLAGS yourself (even empty: ``XLA_FLAGS= pytest``) to compile as users' programs are compiled."""
    flags = ["--xla_backend_optimization_level=0"]
    try:
        from importlib.metadata import version

        major, minor = (int(v) for v in version("jaxlib").split(".")[:2])
        if (major, minor) == (0, 10):
            flags.append("--xla_cpu_use_fusion_emitters=false")
    except Exception:  # noqa: BLE001 - no jaxlib metadata: the portable flag only
        pass
    return " ".join(flags)


if "XLA_FLAGS" not in os.environ:  # subprocesses of the tests inherit it (CLI, distributed, README tests)
    os.environ["XLA_FLAGS"] = _test_xla_flags()


# ----------------------------------------------------------------------------- shared data (one copy each)
import uuid  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def _blobs(n, d=16, k=4, seed=0, *, centers_seed=1234, scale=2.0):
    """Gaussian blobs: the same k class centres in every call (``centers_seed``), rows from ``seed``."""
    centers = np.random.default_rng(centers_seed).normal(size=(k, d)) * scale
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    X = (centers[y] + rng.normal(size=(n, d))).astype(np.float32)
    return X, y.astype(np.int64)


@pytest.fixture(scope="session")
def blobs():
    """``blobs(n, d=16, k=4, seed=0)`` -> (X float32 (n, d), y int64 (n,)) from fixed class centres."""
    return _blobs


def _write_store(url, splits, *, shard_rows=64, chunk_rows=32, dtype="float32", attrs=None, valid=None,
                 own_items=True):
    """Write ``splits`` ({name: (X, y)}) with row ids ``f"{name}{row}"``. ``own_items``: each row's item is a name
    unique to this store, so each test store's rows are their own images with their own budget; False: the items
    follow the ids (``stores.layout.default_items``), so stores written so hold the same images."""
    import stores
    from stores.items import of_name

    prefix = uuid.uuid4().hex
    for name, (X, y) in splits.items():
        w = stores.create_split(url, name, n_rows=len(y), dim=X.shape[1], dtype=dtype, shard_rows=shard_rows,
                                chunk_rows=min(chunk_rows, shard_rows), attrs=dict(attrs or {"backbone": "test"}))
        for i in w.pending():
            a, b = w.shard_bounds(i)
            v = None if valid is None or name not in valid else valid[name][a:b]
            items = [of_name(f"test store {prefix}: {name}{j}") for j in range(a, b)] if own_items else None
            w.write_shard(i, X[a:b], y[a:b], np.array([f"{name}{j}" for j in range(a, b)]), v, items=items)
        assert w.finalize()
    return stores.open(url)


@pytest.fixture
def make_store(tmp_path):
    """``make_store(splits, where="local"|"memory", **kw)`` -> stores.FeatureStore with those (X, y) splits."""
    def make(splits, where="local", **kw):
        url = str(tmp_path / f"{uuid.uuid4().hex[:8]}.zarr") if where == "local" else f"memory://t-{uuid.uuid4().hex}"
        return _write_store(url, splits, **kw)
    return make


@pytest.fixture(scope="session")
def digits():
    """sklearn digits, rows at unit norm, stratified 80/20 split with seed 0: (Xtr, Xte, ytr, yte)."""
    return _digits()


def _digits():
    """:func:`digits`, for a test's subprocess too."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    return train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)


@pytest.fixture(autouse=True)
def ledger_home(tmp_path_factory, monkeypatch):
    """Every test charges its own ledger home (a fresh folder; its subprocesses inherit it), never the user's."""
    home = tmp_path_factory.mktemp("ledger-home")
    monkeypatch.setenv("PRIVLIN_LEDGER_HOME", str(home))
    return home


def pytest_collection_modifyitems(config, items):
    """The unit tier (``-m unit``) leaves out the tests marked ``heavy`` (seconds of compiling or PLD calibration
    each): they run in the full suite, and the tier stays a quick check of the pure pieces."""
    if "unit" not in (config.option.markexpr or ""):
        return
    heavy = [item for item in items if item.get_closest_marker("heavy") is not None]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if item.get_closest_marker("heavy") is None]
