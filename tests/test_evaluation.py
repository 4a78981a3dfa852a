"""The evaluation split of privlin.evaluate and of a sweep pays for its exact accuracies (a
NonPrivateDpEvent on its ledger, refused by any cap before a row is read), or is declared public, and says so."""
import pytest
from dp_accounting import dp_event as ev

import privlin
from privlin import data
from privlin.ledger import PrivacyBudgetExceeded, PrivacyLedger
from privlin.sweep import sweep

K = 4


@pytest.fixture
def store(make_store, blobs):
    X, y = blobs(160, d=8, k=K, seed=41)
    return make_store({"train": (X[:96], y[:96]), "test": (X[96:], y[96:])})


def _ledger(st, split):
    return data.as_source(st, split).ledger()


def test_evaluate_charges_the_test_split_or_records_it_public(store):
    model = privlin.fit(store, epsilon=2.0, classes=range(K), steps=3, random_state=0)
    acc = privlin.evaluate(model, store)
    test = _ledger(store, "test")
    assert [e.event for e in test.entries] == [ev.NonPrivateDpEvent()] and test.spent()[0] == float("inf")
    assert test.entries[0].mechanism == "privlin.evaluate/accuracy" and test.entries[0].params["n"] == 64
    assert privlin.evaluate(model, store, public=True) == acc
    assert test.entries[-1].event == ev.NoOpDpEvent() and "declared public" in test.entries[-1].params["note"]
    # arrays pay on a ledger given to them
    X, y = data.as_source(store, "test").split.to_numpy()
    led = PrivacyLedger.in_memory()
    assert privlin.evaluate(model, (X, y), ledger=led) == acc and led.entries[0].event == ev.NonPrivateDpEvent()


def test_a_capped_test_split_refuses_evaluation_before_reading(store):
    model = privlin.fit(store, epsilon=2.0, classes=range(K), steps=3, random_state=0)
    _ledger(store, "test").set_cap(8.0, 1e-5, note="private test split")
    with pytest.raises(PrivacyBudgetExceeded, match="Nothing was read"):
        privlin.evaluate(model, store)
    train_before = len(_ledger(store, "train"))
    with pytest.raises(PrivacyBudgetExceeded, match="Nothing was read"):  # refused before the training is charged
        sweep(store, epsilon=[1.0, 2.0], classes=range(K), steps=3)
    assert len(_ledger(store, "test")) == 0 and len(_ledger(store, "train")) == train_before
    res = sweep(store, epsilon=[1.0, 2.0], classes=range(K), steps=3, eval_public=True)  # declared public
    assert res.eval_public and all("declared public" in r["eval_charge"] for r in res.records)
    test = _ledger(store, "test")
    assert [e.event for e in test.entries] == [ev.NoOpDpEvent()] and "declared public" in test.entries[0].mechanism


def test_a_sweep_charges_its_evaluation_split(store):
    res = sweep(store, epsilon=[1.0, 2.0], classes=range(K), steps=3)
    test = _ledger(store, "test")
    assert [e.event for e in test.entries] == [ev.NonPrivateDpEvent()]
    assert test.entries[0].mechanism == "privlin.sweep/evaluation" and test.entries[0].params["settings"] == 2
    assert all(r["accuracy"] is not None and "charged to" in r["eval_charge"] for r in res.records)
