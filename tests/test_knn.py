"""privlin.knn against scikit-learn's brute-force k-NN, and the overlap audit on planted duplicates."""
import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier

from privlin.knn import knn_accuracy, overlap_audit


def _blobs(rng, n, d=16, classes=4, spread=1.5):
    centers = rng.normal(size=(classes, d)) * spread
    y = rng.integers(0, classes, n)
    return (centers[y] + rng.normal(size=(n, d))).astype(np.float32), y.astype(np.int64)


@pytest.mark.parametrize("k,classes", [(1, 4), (7, 2)])  # no vote ties: both rules are the same rule
def test_knn_accuracy_matches_sklearn_cosine(k, classes):
    X, y = _blobs(np.random.default_rng(0), 500, classes=classes, spread=0.6)
    Xtr, ytr, Xte, yte = X[:300], y[:300], X[300:], y[300:]
    ref = KNeighborsClassifier(n_neighbors=k, metric="cosine", algorithm="brute").fit(Xtr, ytr).score(Xte, yte)
    got = knn_accuracy((Xtr, ytr), (Xte, yte), k=k, weighted=False)
    assert got.accuracy == pytest.approx(ref, abs=1e-12)
    assert got.private is False and got.n_train == 300 and got.n_test == 200


def test_knn_on_store_equals_arrays_and_separates_easy_from_random(make_store):
    rng = np.random.default_rng(1)
    X, y = _blobs(rng, 400, spread=3.0)
    st = make_store({"train": (X[:300], y[:300]), "test": (X[300:], y[300:])}, where="memory")
    on_store = knn_accuracy(st["train"], st["test"], k=5)
    on_arrays = knn_accuracy((X[:300], y[:300]), (X[300:], y[300:]), k=5)
    assert on_store.accuracy == on_arrays.accuracy
    assert on_store.accuracy > 0.9
    shuffled = knn_accuracy((X[:300], rng.permutation(y[:300])), (X[300:], y[300:]), k=5)
    assert shuffled.accuracy < 0.5  # labels carry no signal -> near chance (0.25)


def test_overlap_audit_finds_exactly_the_planted_twins(make_store):
    rng = np.random.default_rng(2)
    public = rng.normal(size=(500, 32)).astype(np.float32)
    private = rng.normal(size=(200, 32)).astype(np.float32)
    planted = np.array([3, 50, 51, 199])
    source = np.array([10, 400, 7, 0])
    # a twin: the public image, rescaled and lightly perturbed (cosine stays ~0.999)
    private[planted] = 2.0 * public[source] + 0.01 * rng.normal(size=(4, 32))
    st_pub = make_store({"pub": (public, np.zeros(500, np.int64))}, where="memory")  # ids pub0, pub1, ...
    st_priv = make_store({"priv": (private, np.zeros(200, np.int64))}, where="memory")
    rep = overlap_audit(st_pub["pub"], st_priv["priv"], threshold=0.95)
    assert rep.n_private == 200 and rep.n_public == 500 and rep.n_with_twin == 4
    assert dict(zip(rep.private_ids, rep.public_ids)) == {f"priv{p}": f"pub{s}" for p, s in zip(planted, source)}
    # independent check of the similarities: brute-force cosine in float64
    P = private / np.linalg.norm(private, axis=1, keepdims=True)
    Q = public / np.linalg.norm(public, axis=1, keepdims=True)
    np.testing.assert_allclose(rep.max_similarity, (P.astype(np.float64) @ Q.T).max(1), atol=1e-5)
    assert rep.fraction == pytest.approx(4 / 200)
    assert "4 of 200 private rows" in rep.summary()


def test_bad_inputs_are_clear_errors():
    X = np.ones((5, 3), np.float32)
    y = np.zeros(5, np.int64)
    with pytest.raises(ValueError, match="D=3 but test has D=4"):
        knn_accuracy((X, y), (np.ones((2, 4), np.float32), y[:2]))
    with pytest.raises(ValueError, match="k must be"):
        knn_accuracy((X, y), (X, y), k=0)
    with pytest.raises(ValueError, match="threshold"):
        overlap_audit((X, y), (X, y), threshold=1.5)
    with pytest.raises(ValueError, match="NaN"):
        overlap_audit((X, y), (np.full((2, 3), np.nan, np.float32), y[:2]), declare_public=True)
    with pytest.raises(TypeError, match="stores.Split"):
        knn_accuracy(X, (X, y))
    from privlin.ledger import PrivacyBudgetExceeded, PrivacyLedger

    with pytest.raises(PrivacyBudgetExceeded):  # a non-private release is refused by any cap, before it runs
        knn_accuracy((X, y), (X, y), ledger=PrivacyLedger.in_memory(cap=(10.0, 1e-5)))


def _untouchable(source):
    """A store split's source that fails the test if a row of it is read."""
    from privlin import data

    class Untouchable(data.SplitSource):
        def blocks(self, rows, page_locked=False):
            raise AssertionError("a row was read")

        fit_blocks = blocks

    return Untouchable(source.split, source.store)


def test_the_test_split_pays_for_the_knn_or_is_declared_public(make_store):
    """The k-NN accuracy is exact about the test rows too: their ledger gains a NonPrivateDpEvent, a
    capped test ledger refuses before any row (of either split) is read or charged, and public_test=True records
    the declaration instead."""
    from dp_accounting import dp_event as ev

    from privlin import data
    from privlin.ledger import PrivacyBudgetExceeded

    rng = np.random.default_rng(3)
    X, y = _blobs(rng, 200, spread=3.0)
    st = make_store({"train": (X[:120], y[:120]), "test": (X[120:], y[120:])})
    train_led, test_led = (data.as_source(st, s).ledger() for s in ("train", "test"))
    res = knn_accuracy(st["train"], st["test"], k=3)
    assert [e.event for e in test_led.entries] == [ev.NonPrivateDpEvent()] and test_led.spent()[0] == float("inf")
    assert test_led.entries[0].params["n"] == 80 and "charged to" in res.test_charge and not res.public_test
    assert len(train_led) == 1

    capped = make_store({"train": (X[:120], y[:120]), "test": (X[120:], y[120:])})
    data.as_source(capped, "test").ledger().set_cap(1.0, 1e-5, note="the test split is private")
    tr, te = (_untouchable(data.as_source(capped, s)) for s in ("train", "test"))
    with pytest.raises(PrivacyBudgetExceeded, match="Nothing was read"):
        knn_accuracy(tr, te, k=3)
    assert len(data.as_source(capped, "test").ledger()) == 0 and len(data.as_source(capped, "train").ledger()) == 0

    declared = knn_accuracy(st["train"], st["test"], k=3, public_test=True)
    assert declared.public_test and "declared public" in declared.test_charge
    last = test_led.entries[-1]
    assert last.event == ev.NoOpDpEvent() and "declared public" in last.mechanism
    assert declared.accuracy == res.accuracy


def test_the_overlap_audit_is_charged_to_the_private_rows_or_declared_public(make_store):
    """The audit's counts, per-row similarities and private ids are exact: the private split's ledger gains
    a NonPrivateDpEvent before any row is read, a capped one refuses with nothing read, ``declare_public=True``
    records the declaration instead, and arrays with no ledger are warned."""
    import warnings

    from dp_accounting import dp_event as ev

    from privlin import PrivacyLeakWarning, data
    from privlin.ledger import PrivacyBudgetExceeded, PrivacyLedger

    rng = np.random.default_rng(4)
    pub, priv = rng.normal(size=(50, 8)).astype(np.float32), rng.normal(size=(30, 8)).astype(np.float32)
    st = make_store({"pub": (pub, np.zeros(50, np.int64)), "train": (priv, np.zeros(30, np.int64))})
    led = data.as_source(st, "train").ledger()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)  # charged: nothing to warn about
        rep = overlap_audit(st["pub"], st["train"])
    assert [e.event for e in led.entries] == [ev.NonPrivateDpEvent()] and led.entries[0].mechanism == \
        "privlin.knn/overlap_audit" and led.entries[0].params["n"] == 30
    assert "charged to" in rep.charge and "charged to" in rep.summary()
    pub_led = data.as_source(st, "pub").ledger()
    assert len(pub_led) == 0  # the public side is not charged

    declared = overlap_audit(st["pub"], st["train"], declare_public=True)
    assert led.entries[-1].event == ev.NoOpDpEvent() and "declared public" in declared.charge
    np.testing.assert_array_equal(declared.max_similarity, rep.max_similarity)

    capped = make_store({"pub": (pub, np.zeros(50, np.int64)), "train": (priv, np.zeros(30, np.int64))})
    cap_led = data.as_source(capped, "train").ledger()
    cap_led.set_cap(5.0, 1e-5, note="private")
    with pytest.raises(PrivacyBudgetExceeded, match="Nothing was read"):
        overlap_audit(capped["pub"], _untouchable(data.as_source(capped, "train")))
    assert len(cap_led) == 0

    with pytest.warns(PrivacyLeakWarning, match="not charged"):
        overlap_audit((pub, np.zeros(50)), (priv, np.zeros(30)))
    mine = PrivacyLedger.in_memory()
    overlap_audit((pub, np.zeros(50)), (priv, np.zeros(30)), ledger=mine)
    assert [e.event for e in mine.entries] == [ev.NonPrivateDpEvent()]


def test_knn_test_labels_are_matched_as_a_fit_matches_them():
    """An odd test label (an array, None) is a wrong vote, never an error, after the charge."""
    X, y = _blobs(np.random.default_rng(5), 200, spread=3.0)
    odd = y[100:].astype(object)
    odd[0], odd[1] = np.array([1, 2]), None
    nulls = y[100:].copy()
    nulls[:2] = -1
    a = knn_accuracy((X[:100], y[:100]), (X[100:], odd), k=3)
    b = knn_accuracy((X[:100], y[:100]), (X[100:], nulls), k=3)
    assert a.accuracy == b.accuracy
