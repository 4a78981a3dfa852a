"""Fits and sweeps on a store split are charged to its ledger; a fit past the budget reads nothing."""
import numpy as np
import pytest
from dp_accounting import NeighboringRelation
from dp_accounting.pld import pld_privacy_accountant

import privlin.api
import stores
from privlin.ledger import PrivacyBudgetExceeded, PrivacyLedger, ledger_for

DELTA = 1e-5


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(0)
    url = str(tmp_path / "f.zarr")
    n, d = 120, 8
    w = stores.create_split(url, "train", n_rows=n, dim=d, dtype="float32", shard_rows=64)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    for i in w.pending():
        a, b = w.shard_bounds(i)
        w.write_shard(i, X[a:b], y[a:b], np.arange(a, b).astype(str))
    w.finalize()
    return url


def test_two_fits_and_a_sweep_compose_to_the_ledger_total(store):
    from privlin import sweep as sw

    m1 = privlin.api.fit(store, eps=1.0, classes=[0, 1], method="adam1", random_state=0)
    m2 = privlin.api.fit(store, eps=2.0, classes=[0, 1], method="sgd", steps=5, random_state=1)
    sw.sweep(store, eps=[0.5, 1.0], classes=[0, 1], eval_split=None, random_state=2)
    led = ledger_for(store, "train")
    entries = led.entries
    assert [e.mechanism for e in entries[:2]] == ["DPLinearClassifier/adam1", "DPLinearClassifier/sgd"]
    assert len(entries) >= 3
    assert entries[0].event == m1.privacy_.dp_event and entries[1].event == m2.privacy_.dp_event
    acc = pld_privacy_accountant.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE)
    for e in entries:
        acc.compose(e.event)
    assert led.spent(DELTA)[0] == pytest.approx(acc.get_epsilon(DELTA), rel=1e-9)
    assert m1.ledger_.path == led.path


def test_fit_past_the_budget_raises_and_reads_nothing(store, monkeypatch):
    privlin.api.fit(store, eps=1.0, classes=[0, 1], method="adam1", budget=(1.2, DELTA), random_state=0)
    reads = []
    for name in ("blocks", "to_numpy"):
        orig = getattr(stores.Split, name)
        monkeypatch.setattr(stores.Split, name, lambda self, *a, _o=orig, _n=name, **k: (reads.append(_n), _o(self, *a, **k))[1])
    monkeypatch.setattr(stores.Split, "labels", property(lambda self: reads.append("labels")), raising=False)
    with pytest.raises(PrivacyBudgetExceeded):
        privlin.api.fit(store, eps=1.0, method="adam1", budget=(1.2, DELTA), random_state=0)  # classes=None too
    assert reads == []
    assert len(ledger_for(store, "train")) == 1


def test_arrays_charge_a_given_ledger_and_budget():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 4))
    y = (X[:, 0] > 0).astype(int)
    led = PrivacyLedger.in_memory(cap=(2.5, DELTA))
    privlin.api.fit((X, y), eps=2.0, classes=[0, 1], method="adam1", ledger=led, random_state=0)
    assert len(led) == 1
    with pytest.raises(PrivacyBudgetExceeded):
        privlin.api.fit((X, y), eps=2.0, classes=[0, 1], method="adam1", ledger=led, random_state=0)
    with pytest.raises(PrivacyBudgetExceeded):
        privlin.api.fit((X, y), eps=2.0, classes=[0, 1], method="adam1", budget=(1.0, DELTA))
    # no ledger, no budget: arrays are not charged anywhere (and nothing fails)
    m = privlin.api.fit((X, y), eps=2.0, classes=[0, 1], method="adam1", random_state=0)
    assert not hasattr(m, "ledger_")


def test_non_private_fit_is_labelled_and_spends_the_whole_budget(store):
    from privlin.report import PrivacyLeakWarning

    with pytest.warns(PrivacyLeakWarning, match="NON-PRIVATE"):
        m = privlin.api.fit(store, eps=float("inf"), classes=[0, 1], method="sgd", steps=5, random_state=0)
    assert m.privacy_.epsilon == float("inf") and m.privacy_.accountant == "none"
    assert set(m.privacy_.noise_multipliers.values()) == {0.0}
    assert "NON-PRIVATE" in str(m.privacy_) and m.privacy_.leaks
    assert ledger_for(store, "train").spent(DELTA)[0] == float("inf")  # recorded: the split has no privacy left
    with pytest.raises(PrivacyBudgetExceeded):  # any cap refuses it, before reading anything
        privlin.api.fit(store, eps=float("inf"), classes=[0, 1], budget=(100.0, DELTA))
