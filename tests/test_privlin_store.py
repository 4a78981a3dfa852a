"""privlin.fit / evaluate on feature stores: streaming equals in-memory, bounded passes, clear errors."""
import uuid

import numpy as np
import pytest

import privlin
import stores

K = 4


def blobs(n, d=16, seed=0):
    centers = np.random.default_rng(1234).normal(size=(K, d)) * 2  # the same classes in every split
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    X = (centers[y] + rng.normal(size=(n, d))).astype(np.float32)
    return X, y


def write_split(url, split, X, y, shard_rows=64, valid=None):
    w = stores.create_split(url, split, n_rows=len(X), dim=X.shape[1], dtype="float32", shard_rows=shard_rows,
                            chunk_rows=32, attrs={"backbone": "test"})
    for i in w.pending():
        a, b = w.shard_bounds(i)
        w.write_shard(i, X[a:b], y[a:b], np.array([f"r{j}" for j in range(a, b)]),
                      None if valid is None else valid[a:b])
    assert w.finalize()


def make_store(kind, tmp_path):
    url = str(tmp_path / "feats.zarr") if kind == "local" else f"memory://privlin-{uuid.uuid4().hex}"
    Xtr, ytr = blobs(600, seed=0)
    Xte, yte = blobs(200, seed=1)
    write_split(url, "train", Xtr, ytr)
    write_split(url, "test", Xte, yte)
    return url, (Xtr, ytr), (Xte, yte)


@pytest.fixture(params=["local", "memory"])
def store_url(request, tmp_path):
    return make_store(request.param, tmp_path)


@pytest.fixture
def local_store(tmp_path):
    return make_store("local", tmp_path)


@pytest.mark.parametrize("method", ["sgd", "adam1"])
def test_fit_on_store_equals_fit_on_arrays(store_url, method):
    url, (Xtr, ytr), (Xte, yte) = store_url
    params = dict(method=method, classes=range(K), random_state=3, steps=None if method == "adam1" else 20)
    m_store = privlin.fit(url, eps=4, **params, block_rows=128)
    m_arr = privlin.fit((Xtr, ytr), eps=4, **params)
    assert np.allclose(m_store.coef_, m_arr.coef_, atol=1e-4)
    assert m_store.privacy_.epsilon == pytest.approx(m_arr.privacy_.epsilon)
    acc = privlin.evaluate(m_store, url)
    assert acc == pytest.approx(m_arr.score(Xte, yte))
    assert acc > 0.9  # well-separated blobs: private training still learns them


def test_streaming_sgd_equals_in_memory(local_store):
    url, _, _ = local_store
    params = dict(method="sgd", classes=range(K), random_state=5, steps=8, block_rows=128)
    in_mem = privlin.fit(url, eps=2, **params)
    streamed = privlin.fit(url, eps=2, memory_limit=0, **params)  # one pass over the store per step
    assert np.allclose(in_mem.coef_, streamed.coef_, atol=1e-4)


def test_streaming_minibatch_runs_and_accounts_with_pld(local_store):
    url, _, _ = local_store
    m = privlin.fit(url, eps=4, method="minibatch", steps=10, batch_size=100, classes=range(K), random_state=0,
                    memory_limit=0, block_rows=128)
    assert m.privacy_.accountant == "pld" and m.privacy_.sample_rate == pytest.approx(100 / 600)
    assert m.privacy_.epsilon <= 4.0
    assert privlin.evaluate(m, url) > 0.8


def test_invalid_rows_are_not_trained_on(tmp_path):
    url = str(tmp_path / "s.zarr")
    X, y = blobs(256, seed=2)
    valid = np.ones(256, bool)
    valid[::5] = False
    write_split(url, "train", X, y, valid=valid)
    m_store = privlin.fit(url, eps=4, method="adam1", classes=range(K), random_state=1)
    m_arr = privlin.fit((X[valid], y[valid]), eps=4, method="adam1", classes=range(K), random_state=1)
    assert m_store.privacy_.n_rows == valid.sum()
    assert np.allclose(m_store.coef_, m_arr.coef_, atol=1e-5)


def test_store_errors(tmp_path):
    url = str(tmp_path / "e.zarr")
    X, y = blobs(128, seed=3)
    write_split(url, "train", X, y)
    with pytest.raises(ValueError, match="not in classes"):
        privlin.fit(url, eps=1, classes=[0, 1], random_state=0)
    with pytest.raises(KeyError):
        privlin.fit(url, eps=1, split="nope", classes=range(K))
    with pytest.warns(privlin.PrivacyLeakWarning):
        m = privlin.fit(url, eps=1, method="adam1", random_state=0)
    assert list(m.classes_) == list(range(K)) and m.privacy_.leaks == ("classes",)
    # a split whose shards are not all written is refused before training
    partial = str(tmp_path / "partial.zarr")
    w = stores.create_split(partial, "train", n_rows=128, dim=16, dtype="float32", shard_rows=64)
    w.write_shard(0, X[:64], y[:64], np.array([str(i) for i in range(64)]))
    with pytest.raises(stores.IncompleteStoreError):
        privlin.fit(partial, eps=1, classes=range(K))
