"""privlin.data: every input becomes one kind of source; one class-list policy; the ledger a source charges."""
import warnings

import numpy as np
import pytest

import privlin
import stores
from privlin import data
from privlin.ledger import PrivacyLedger

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


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def _skipped(blobs, n=300, seed=2):
    """Rows, labels and a valid mask with skipped rows spread over the shards (of 64 rows) and one whole shard."""
    X, y = blobs(n, seed=seed)
    valid = np.ones(n, bool)
    valid[::7] = False
    valid[128:192] = False
    return X, y, valid


def test_a_split_source_counts_skipped_rows_in_n_and_yields_them_as_null_rows(make_store, blobs):
    X, y, valid = _skipped(blobs)
    rng = np.random.default_rng(0)
    garbage = np.where(valid[:, None], X, rng.normal(scale=50, size=X.shape)).astype(np.float32)
    st = make_store({"train": (garbage, y)}, valid={"train": valid})
    src = data.as_source(st, "train")
    assert (src.n, src.n_local, src.n_local_max, src.n_valid) == (300, 300, 300, int(valid.sum()))
    got = list(src.fit_blocks(128))
    Xs = np.concatenate([b[0] for b in got])
    ys = np.concatenate([b[1] for b in got])
    vs = np.concatenate([np.ones(len(b[1]), bool) if b[2] is None else b[2] for b in got])
    np.testing.assert_array_equal(vs, valid)  # every row, in row order, with its mask
    np.testing.assert_array_equal(Xs, np.where(valid[:, None], X, 0))  # a skipped row's features are zeroed
    np.testing.assert_array_equal(ys, y)
    Xb, yb = (np.concatenate(a) for a in zip(*src.blocks(128)))  # the helpers' blocks: rows with features only
    np.testing.assert_array_equal(Xb, X[valid])
    np.testing.assert_array_equal(yb, y[valid])
    assert list(src.ids()) == [f"train{i}" for i in np.flatnonzero(valid)]  # aligned with blocks()
    # whether one more image decoded changes no public number: N is the split's row count
    one_more = valid.copy()
    one_more[5] = False
    other = data.as_source(make_store({"train": (X, y)}, valid={"train": one_more}), "train")
    assert (other.n, other.n_local, other.n_local_max) == (src.n, src.n_local, src.n_local_max)


@pytest.mark.parametrize("method", ["adam1", "sgd", "minibatch"])
def test_rows_skipped_at_extraction_count_in_n_and_contribute_nothing(make_store, blobs, method):
    """N (report, ledger, plan) is the split's row count; a skipped row is a null row: the fit equals, bit for
    bit, the fit on arrays where that row is null by its label, and the fit where it holds garbage features."""
    from privlin import DPLinearClassifier

    X, y, valid = _skipped(blobs)
    rng = np.random.default_rng(0)
    zeroed = np.where(valid[:, None], X, 0).astype(np.float32)  # what featurize --skip-bad writes
    garbage = np.where(valid[:, None], X, rng.normal(scale=50, size=X.shape)).astype(np.float32)
    y_garbage = np.where(valid, y, rng.integers(0, K, len(y)))  # labels in the class list: only the mask nulls them
    Xte, yte, vte = _skipped(blobs, n=150, seed=3)
    st_zero = make_store({"train": (zeroed, y), "test": (Xte, yte)}, valid={"train": valid, "test": vte})
    st_garbage = make_store({"train": (garbage, y_garbage)}, valid={"train": valid})
    p = dict(epsilon=4.0, method=method, steps=None if method == "adam1" else 4, classes=range(K), batch_size=100,
             random_state=1, block_rows=128)
    ref = DPLinearClassifier(**p).fit(zeroed, np.where(valid, y, -1))  # skipped rows: null by an unknown label
    fits = {(name, limit): privlin.fit(st, memory_limit=limit, **p)
            for name, st in (("zero", st_zero), ("garbage", st_garbage)) for limit in (2**30, 0)}
    for (name, limit), m in fits.items():
        assert m.privacy_.n_rows == 300 and m.plan_ == ref.plan_, (name, limit)
        assert m.ledger_.entries[-1].params["n"] == 300
    for limit in (2**30, 0):  # garbage in a skipped row changes no bit
        garbage, zero = fits["garbage", limit], fits["zero", limit]
        np.testing.assert_array_equal(garbage.coef_transformed_, zero.coef_transformed_)
        np.testing.assert_array_equal(garbage.intercept_transformed_, zero.intercept_transformed_)
    in_memory = fits["zero", 2**30]  # in memory: one path, bit for bit
    np.testing.assert_array_equal(in_memory.coef_transformed_, ref.coef_transformed_)
    np.testing.assert_array_equal(in_memory.intercept_transformed_, ref.intercept_transformed_)
    # streamed (a minibatch sample keeps row positions)
    assert _rel(fits["zero", 0].coef_transformed_, ref.coef_transformed_) < 1e-5
    # evaluation is over the rows that have features: a skipped test image has no prediction
    assert privlin.evaluate(ref, st_zero) == pytest.approx(ref.score(Xte[vte], yte[vte]))
    if method == "adam1":  # and so is a sweep's: the same accuracy as evaluate
        from privlin.sweep import sweep

        res = sweep(st_zero, settings=[p], random_state=1)
        assert res.records[0]["accuracy"] == pytest.approx(privlin.evaluate(res.model(0), st_zero))


def test_a_class_list_read_from_the_labels_fails_before_the_charge(blobs):
    """One label value and no class list: the error comes with the leak warning, before any ledger entry."""
    from privlin import DPLinearClassifier
    from privlin.sweep import sweep

    X, _ = blobs(64, seed=6)
    one = np.zeros(64, np.int64)
    led = PrivacyLedger.in_memory()
    with pytest.warns(privlin.PrivacyLeakWarning, match="inferred"), \
            pytest.raises(ValueError, match="at least 2 classes"):
        DPLinearClassifier(epsilon=1.0, ledger=led, random_state=0).fit(X, one)
    assert len(led) == 0
    with pytest.warns(privlin.PrivacyLeakWarning, match="inferred"), \
            pytest.raises(ValueError, match="at least 2 classes"):
        sweep((X, one), epsilon=[1.0, 2.0], ledger=led, random_state=0, eval_split=None)
    assert len(led) == 0
    odd = one.astype(object)
    odd[3] = None
    with pytest.warns(privlin.PrivacyLeakWarning, match="inferred"), pytest.raises(ValueError, match="classes="):
        sweep((X, odd), epsilon=[1.0], ledger=led, random_state=0, eval_split=None)
    assert len(led) == 0
    led.set_cap(0.5, 1e-5)  # a refused fit still reads no label: the cap is checked first
    source = data.ArraySource(X, np.arange(64) % 2)
    source.labels = lambda: pytest.fail("labels read before a refused charge")
    with pytest.raises(privlin.ledger.PrivacyBudgetExceeded):
        DPLinearClassifier(epsilon=1.0, ledger=led, random_state=0).fit(source)
    assert len(led) == 0


def test_labels_of_another_type_are_null_rows_never_errors():
    classes = np.arange(3)
    idx, known = data.label_index(classes, np.array([0, None, "a", 2.0, [1], 1], dtype=object))
    assert idx.tolist() == [0, 0, 0, 2, 0, 1] and known.tolist() == [True, False, False, True, False, True]
    idx, known = data.label_index(classes, np.array(["0", "1"]))  # text is not a number
    assert not known.any()
    idx, known = data.label_index(np.array(["a", "b"]), np.array([0, 1]))
    assert not known.any()


@pytest.mark.parametrize("memory_limit", [2**30, 0])
def test_a_sweep_on_an_object_label_array_makes_odd_labels_null_rows(blobs, memory_limit):
    """A None and a string among int labels (object y): no error after the charge; those rows are null rows,
    exactly as rows whose label is not in the class list."""
    from privlin.sweep import sweep

    X, y = blobs(120, seed=7)
    odd = y.astype(object)
    odd[3], odd[10] = None, "cat"
    nulls = y.copy()
    nulls[[3, 10]] = -1
    kw = dict(epsilon=[1.0, 4.0], classes=range(K), method="sgd", steps=3, random_state=0, eval_split=None,
              memory_limit=memory_limit, block_rows=64)
    led = PrivacyLedger.in_memory()
    res = sweep((X, odd), ledger=led, **kw)
    ref = sweep((X, nulls), **kw)
    assert len(led) == 1
    for a, b in zip(res.coef, ref.coef):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(res.intercept, ref.intercept)


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
def test_a_store_split_charges_its_items_in_the_home_and_nothing_else(make_store, blobs, where, ledger_home):
    X, y = blobs(64, seed=4)
    st = make_store({"train": (X, y), "test": (X, y)}, where=where)
    for given in (st.url, st, st["train"]):
        led = data.as_source(given, "train").ledger()
        assert led.path == str(ledger_home / "ledger.sqlite")
        assert led.scope.key == PrivacyLedger.for_items(st["train"].items[:]).scope.key
    assert data.as_source(st, "test").ledger().scope.key != led.scope.key  # other ids: other items
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


def test_a_class_list_of_another_kind_than_the_labels_is_refused_before_the_charge(make_store, blobs):
    """Names for a store's int labels (or ints for string labels) would make every row a null row: refused."""
    from privlin import DPLinearClassifier
    from privlin.ledger import PrivacyLedger

    X, y = blobs(120)
    st = make_store({"train": (X, y)})
    with pytest.raises(ValueError, match="classes are strings"):
        privlin.fit(st, epsilon=1.0, classes=["a", "b", "c", "d"])
    assert len(data.as_source(st, "train").ledger()) == 0
    led = PrivacyLedger.in_memory()
    with pytest.raises(ValueError, match="classes are numbers"):
        DPLinearClassifier(epsilon=1.0, classes=range(4), ledger=led).fit(X, np.array(list("abcd"))[y])
    assert len(led) == 0
    DPLinearClassifier(epsilon=1.0, classes=list("abcd"), ledger=led).fit(X, np.array(list("abcd"))[y])
    assert len(led) == 1
