"""privlin.data: every input becomes one kind of source; one class-list policy; the ledger a source charges."""
import warnings

import numpy as np
import pytest

import privlin
import stores
from privlin import data
from privlin.ledger import PrivacyLedger, ledger_path

K = 4


def test_every_input_form_gives_the_same_rows(make_store, blobs):
    X, y = blobs(150, seed=0)
    st = make_store({"train": (X, y)})
    url = st.url
    for given in (url, st, st["train"], data.as_source(st, "train")):
        src = data.as_source(given, "train")
        assert (src.n, src.dim, src.in_memory) == (150, 16, False)
        Xs, ys = zip(*src.blocks(64))
        np.testing.assert_array_equal(np.concatenate(Xs), X)
        np.testing.assert_array_equal(np.concatenate(ys), y)
        assert src.description == f"store {url}, split 'train'"
        assert list(src.ids()[:2]) == ["train0", "train1"]
    arr = data.as_source((X, y))
    assert (arr.n, arr.dim, arr.in_memory, arr.description) == (150, 16, True, "arrays")
    with pytest.raises(ValueError, match="no split 'nope'"):
        data.as_source(url, "nope")
    with pytest.raises(TypeError, match="expected a store"):
        data.as_source(42)
    with pytest.raises(ValueError, match="X must be"):
        data.as_source((X, y[:-1]))


def test_class_list_policy(make_store, blobs):
    X, y = blobs(120, seed=1)
    plain = data.as_source(make_store({"train": (X, y)}), "train")
    published = data.as_source(make_store({"train": (X, y)}, attrs={"classes": ["a", "b", "c", "d", "e"]}), "train")
    with warnings.catch_warnings():
        warnings.simplefilter("error", privlin.PrivacyLeakWarning)
        classes, leaks = data.public_classes(plain, [3, 0, 1, 2])
        assert classes.tolist() == [0, 1, 2, 3] and leaks == []
        classes, leaks = data.public_classes(published)  # featurize's published list: labels index it
        assert classes.tolist() == [0, 1, 2, 3, 4] and leaks == []
    with pytest.warns(privlin.PrivacyLeakWarning, match="inferred from the private labels"):
        classes, leaks = data.public_classes(plain)
    assert classes.tolist() == sorted(set(y.tolist())) and leaks == ["classes"]
    with pytest.raises(ValueError, match="duplicates"):
        data.public_classes(plain, [0, 1, 1])
    with pytest.raises(ValueError, match="at least 2 classes"):
        data.public_classes(plain, [0])


def test_label_index_marks_unknown_labels_as_null_rows():
    idx, known = data.label_index(np.array([2, 5, 9]), np.array([5, 9, 7, 2, -1, 100]))
    assert idx.tolist() == [1, 2, 0, 0, 0, 0] and known.tolist() == [True, True, False, True, False, False]


def test_rows_skipped_at_extraction_are_not_trained_on(make_store, blobs):
    X, y = blobs(256, seed=2)
    valid = np.ones(256, bool)
    valid[::5] = False
    st = make_store({"train": (X, y)}, valid={"train": valid})
    m_store = privlin.fit(st, epsilon=4, method="adam1", classes=range(K), random_state=1)
    m_arr = privlin.fit((X[valid], y[valid]), epsilon=4, method="adam1", classes=range(K), random_state=1)
    assert m_store.privacy_.n_rows == int(valid.sum())
    np.testing.assert_array_equal(m_store.coef_, m_arr.coef_)


def test_store_errors(make_store, blobs, tmp_path):
    X, y = blobs(128, seed=3)
    st = make_store({"train": (X, y)})
    with pytest.raises(ValueError, match="no split 'nope'"):
        privlin.fit(st.url, epsilon=1, split="nope", classes=range(K))
    partial = str(tmp_path / "partial.zarr")  # a split whose shards are not all written is refused before training
    w = stores.create_split(partial, "train", n_rows=128, dim=16, dtype="float32", shard_rows=64)
    w.write_shard(0, X[:64], y[:64], np.array([str(i) for i in range(64)]))
    with pytest.raises(stores.IncompleteStoreError):
        privlin.fit(partial, epsilon=1, classes=range(K))


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_store_split_charges_the_ledger_beside_it_and_nothing_else(make_store, blobs, where):
    X, y = blobs(64, seed=4)
    st = make_store({"train": (X, y), "test": (X, y)}, where=where)
    for given in (st.url, st, st["train"]):
        led = data.as_source(given, "train").ledger()
        assert led.path == PrivacyLedger(ledger_path(st.url, "train")).path
    assert data.as_source(st, "test").ledger().path == PrivacyLedger(ledger_path(st.url, "test")).path
    foreign = PrivacyLedger.in_memory()
    with pytest.raises(ValueError, match="would bypass it"):
        data.as_source(st, "train").ledger(ledger=foreign)
    with pytest.raises(ValueError, match="would bypass it"):  # the same through the estimator, before any charge
        privlin.fit(st, epsilon=1, classes=range(K), ledger=foreign)
    assert len(foreign) == 0 and len(data.as_source(st, "train").ledger()) == 0


def test_arrays_charge_only_a_given_ledger_or_budget(blobs):
    X, y = blobs(50, seed=5)
    src = data.as_source((X, y))
    assert src.ledger() is None
    shared = PrivacyLedger.in_memory()
    assert src.ledger(ledger=shared) is shared
    capped = src.ledger(cap=(1.0, 1e-5))
    assert capped.path is None and capped.cap == (1.0, 1e-5)
