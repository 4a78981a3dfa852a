"""A name a user mistypes is reported before the heavy imports: ``privlin.fit`` checks the store path, the split,
each keyword and the method first, so the error comes while JAX, scikit-learn and torch are still unloaded (asserted
in a fresh process, not timed); the later layers refuse a name in the same words (one check, privlin.spelling)."""
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("jax", "sklearn", "torch")


def _error_in_a_fresh_process(call: str) -> tuple[str, list[str]]:
    """``call``'s exception (type and message) and which heavy modules were loaded when it was raised."""
    code = ("import sys, privlin\n"
            f"try:\n    {call}\nexcept Exception as e:\n"
            f"    print(type(e).__name__, e)\n    print([m for m in {HEAVY!r} if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": ROOT})
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2, out.stdout + out.stderr
    return lines[0], eval(lines[1])  # noqa: S307 - a list of names printed by the child


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    import stores

    url = str(tmp_path_factory.mktemp("fast") / "s.zarr")
    w = stores.create_split(url, "train", n_rows=8, dim=4, dtype="float32", shard_rows=8, chunk_rows=8)
    for s in w.pending():
        a, b = w.shard_bounds(s)
        rows = np.array([f"{i}" for i in range(a, b)])
        w.write_shard(s, np.zeros((b - a, 4), np.float32), np.arange(b - a) % 2, rows)
    assert w.finalize()
    return url


def test_a_missing_store_is_named_before_the_heavy_imports(tmp_path):
    missing = str(tmp_path / "feats.zarr")
    error, loaded = _error_in_a_fresh_process(f"privlin.fit({missing!r}, epsilon=1)")
    assert error == f"FileNotFoundError no feature store at {missing!r}" and loaded == []


def test_a_mistyped_split_is_named_before_the_heavy_imports(store):
    error, loaded = _error_in_a_fresh_process(f"privlin.fit({store!r}, split='trian', epsilon=1)")
    assert error == f"ValueError no split 'trian' in {store!r}; splits: ['train']" and loaded == []


def test_a_mistyped_method_is_named_before_the_heavy_imports(store):
    error, loaded = _error_in_a_fresh_process(f"privlin.fit({store!r}, epsilon=1, method='adma1')")
    assert error.startswith("ValueError unknown method 'adma1'") and "adam1" in error and loaded == []


def test_the_checked_fit_is_the_estimators_fit(store):
    """The check passes a good call through unchanged: the same model as ``privlin.estimator.fit`` on the path."""
    import privlin
    from privlin import estimator

    kw = dict(epsilon=1.0, classes=[0, 1], random_state=0, progress=False)
    a, b = privlin.fit(store, **kw), estimator.fit(store, **kw)
    learned = [k for k, v in vars(b).items() if k.endswith("_") and isinstance(v, np.ndarray)]
    assert learned and all(np.array_equal(getattr(a, k), getattr(b, k)) for k in learned)
    assert a.privacy_.epsilon == b.privacy_.epsilon


def test_a_mistyped_keyword_is_named_with_the_closest_parameter_before_the_heavy_imports(store):
    error, loaded = _error_in_a_fresh_process(f"privlin.fit({store!r}, epsilom=1)")
    assert error == "TypeError unknown parameter 'epsilom': did you mean 'epsilon'?" and loaded == []
    error, loaded = _error_in_a_fresh_process("privlin.fit([[0.0]], [0], epsilon=1, clases=[0, 1])")
    assert error == "TypeError unknown parameter 'clases': did you mean 'classes'?" and loaded == []


def test_every_layer_refuses_a_name_in_the_words_of_the_fast_check(store):
    """The plan, the data layer and the ledger's command line run the check ``privlin.fit`` runs first: one message
    for a mistyped method or split wherever it is typed."""
    import stores
    from privlin import data, plan
    from privlin.ledger import __main__ as ledger_cli

    fast_method, _ = _error_in_a_fresh_process(f"privlin.fit({store!r}, epsilon=1, method='adma1')")
    with pytest.raises(ValueError) as err:
        plan.validate({"method": "adma1"}, 8, 4, 2)
    assert f"ValueError {err.value}" == fast_method
    fast_split, _ = _error_in_a_fresh_process(f"privlin.fit({store!r}, split='trian', epsilon=1)")
    with pytest.raises(ValueError) as err:
        data.as_source(stores.open(store), "trian")
    assert f"ValueError {err.value}" == fast_split
    with pytest.raises(ValueError) as err:
        ledger_cli._resolve(store, "trian")
    assert f"ValueError {err.value}" == fast_split


def test_a_sweep_names_a_mistyped_keyword_as_privlin_fit_does():
    from privlin.sweep import sweep

    X, y = np.zeros((8, 4), np.float32), np.arange(8) % 2
    with pytest.raises(TypeError) as err:
        sweep((X, y), epsilons=[1.0, 2.0], classes=[0, 1], eval_split=None, progress=False)
    assert str(err.value) == "unknown parameter 'epsilons': did you mean 'epsilon'?"
