"""The privacy ledger: PLD totals equal dp-accounting's, the stored cap binds every charge, concurrent writers
lose nothing, and every privlin path that reads private rows is charged."""
import json
import os
import subprocess
import sys

import pytest
from dp_accounting import NeighboringRelation
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant

import closed_forms
import privlin
from privlin import events as E
from privlin import ledger as L
from privlin.ledger.__main__ import main as ledger_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FIT = ev.GaussianDpEvent(3.0)
CENTER = ev.GaussianDpEvent(10.0)
SWEEP = ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(1.5)), 10)
ITEMS = [f"{i:032x}" for i in range(20)]


def _pld_direct(events, delta, relation=NeighboringRelation.REPLACE_SPECIAL):
    acc = pld_privacy_accountant.PLDAccountant(relation)
    for e in events:
        acc.compose(e)
    return acc.get_epsilon(delta)


def test_event_round_trip_nested():
    e = ev.ComposedDpEvent([FIT, SWEEP, ev.NonPrivateDpEvent()])
    d = E.event_to_dict(e)
    assert json.loads(json.dumps(d)) == d
    assert E.event_from_dict(d) == e


def test_a_reports_event_reads_back_through_the_ledgers_codec(blobs):
    X, y = blobs(60, seed=0)
    m = privlin.DPLinearClassifier(epsilon=1.0, classes=range(4), steps=3, random_state=0).fit(X, y)
    d = json.loads(m.privacy_.to_json())["dp_event"]
    assert E.event_from_dict(d) == m.privacy_.dp_event
    assert L.LedgerEntry.from_dict(L.LedgerEntry("fit", m.privacy_.dp_event, 1.0, 1e-5, "replace_special")
                                   .to_dict()).event == m.privacy_.dp_event


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "os.system", "command": 1},
        {"type": "GaussianDpEvent", "noise_multiplier": "__import__('os')"},
        {"type": "GaussianDpEvent", "noise_multiplier": 1.0, "module_name": "os"},
        {"type": "GaussianDpEvent"},
        ["GaussianDpEvent"],
    ],
)
def test_event_from_dict_admits_only_known_events_and_numbers(bad):
    with pytest.raises(ValueError):
        E.event_from_dict(bad)


def test_two_fits_and_a_sweep_total_equals_dp_accounting(ledger_home):
    led = L.PrivacyLedger.for_items(ITEMS)
    assert led.path == str(ledger_home / "ledger.sqlite") and led.neighbouring == "replace_special"
    led.charge(CENTER, mechanism="private_centering", epsilon=0.5, delta=1e-6)
    led.charge(FIT, mechanism="privlin.fit/dp_adam", epsilon=1.5, delta=1e-5)
    led.charge(FIT, mechanism="privlin.fit/dp_adam", epsilon=1.5, delta=1e-5)
    led.charge(SWEEP, mechanism="privlin.sweep", epsilon=4.0, delta=1e-5, params={"lr": [0.1, 1.0]})
    # a fresh object on the same path sees the same history
    again = L.PrivacyLedger.for_items(ITEMS[::-1])  # the same items, in any order
    assert [e.mechanism for e in again.entries] == ["private_centering", "privlin.fit/dp_adam",
                                                    "privlin.fit/dp_adam", "privlin.sweep"]
    eps, delta = again.spent(1e-5)
    assert delta == 1e-5
    assert eps == pytest.approx(_pld_direct([CENTER, FIT, FIT, SWEEP], 1e-5), rel=1e-9)
    # composition is better than adding the parts, worse than any single part
    parts = [_pld_direct([e], 1e-5) for e in (CENTER, FIT, FIT, SWEEP)]
    assert max(parts) < eps < sum(parts)
    # default delta (no cap): the smallest of the entries' deltas, never their sum
    assert again.spent()[1] == 1e-6


def test_cap_refuses_before_recording(tmp_path):
    one = _pld_direct([FIT], 1e-5)
    led = L.PrivacyLedger(tmp_path / "l.json", cap=(1.2 * one, 1e-5))
    led.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    before = (tmp_path / "l.json").read_bytes()
    with pytest.raises(L.PrivacyBudgetExceeded, match="past the cap"):
        led.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    with pytest.raises(L.PrivacyBudgetExceeded):
        led.check(FIT)
    assert (tmp_path / "l.json").read_bytes() == before
    assert len(led) == 1
    # a cheaper mechanism still fits under the cap
    led.charge(ev.GaussianDpEvent(30.0), mechanism="cheap", epsilon=0.2, delta=1e-5)
    assert led.spent()[0] <= 1.2 * one
    # a non-private event is never under a finite cap
    with pytest.raises(L.PrivacyBudgetExceeded):
        L.PrivacyLedger.in_memory(cap=(100.0, 1e-5)).charge(ev.NonPrivateDpEvent(), mechanism="x", epsilon=float("inf"), delta=0)


def test_non_private_entry_totals_infinity():
    led = L.PrivacyLedger.in_memory()
    led.charge(ev.NonPrivateDpEvent(), mechanism="baseline", epsilon=float("inf"), delta=0.0)
    led.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    assert led.spent(1e-5)[0] == float("inf")
    assert L.LedgerEntry.from_dict(led.entries[0].to_dict()).epsilon == float("inf")


def test_in_memory_ledger_saves_and_merges(tmp_path):
    mem = L.PrivacyLedger.in_memory()
    mem.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    mem.charge(SWEEP, mechanism="sweep", epsilon=4, delta=1e-5)
    on_disk = mem.save(tmp_path / "x.json")
    assert [e.id for e in on_disk.entries] == [e.id for e in mem.entries]
    mem.save(tmp_path / "x.json")  # idempotent: no duplicated entries
    assert len(on_disk) == 2
    assert on_disk.spent(1e-5)[0] == pytest.approx(mem.spent(1e-5)[0])


def test_fsspec_memory_url():
    led = L.PrivacyLedger.for_items(ITEMS, home="memory://ledger-test/home")
    led.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    assert len(L.PrivacyLedger.for_items(ITEMS[:3], home="memory://ledger-test/home")) == 1
    assert len(L.PrivacyLedger.for_items(ITEMS[:3])) == 0  # another home


def test_crash_during_write_keeps_the_old_file(tmp_path, monkeypatch):
    p = tmp_path / "l.json"
    led = L.PrivacyLedger(p)
    led.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    before = p.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(L.storage.os, "fsync", boom)
    with pytest.raises(OSError):
        led.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    assert p.read_bytes() == before
    assert [f for f in os.listdir(tmp_path) if f.endswith(".tmp")] == []


def test_mixed_relations_refuse_to_compose(tmp_path):
    p = tmp_path / "l.json"
    L.PrivacyLedger(p, neighbouring="replace_one").charge(FIT, mechanism="a", epsilon=1, delta=1e-5)
    assert L.PrivacyLedger(p).neighbouring == "replace_one"  # the relation is stored with the entries
    with pytest.raises(ValueError, match="do not compose"):
        L.PrivacyLedger(p, neighbouring="replace_special").charge(FIT, mechanism="b", epsilon=1, delta=1e-5)
    assert len(L.PrivacyLedger(p)) == 1


def test_bad_inputs():
    with pytest.raises(ValueError, match="cap"):
        L.PrivacyLedger.in_memory(cap=(1.0, 2.0))
    with pytest.raises(ValueError, match="relation"):
        L.PrivacyLedger.in_memory(neighbouring="swap")
    with pytest.raises(ValueError, match="split"):
        L.ledger_path("/x", "../etc")
    with pytest.raises(TypeError):
        L.PrivacyLedger.in_memory().charge(object(), mechanism="x", epsilon=1, delta=1e-5)


def test_not_a_ledger(tmp_path):
    p = tmp_path / "l.json"
    p.write_text(json.dumps({"format": "something else", "entries": []}))
    with pytest.raises(ValueError, match="not a privlin ledger"):
        L.PrivacyLedger(p).entries


def test_cli_prints_history_and_total(tmp_path):
    from faults.inject import write_store

    write_store(str(tmp_path / "s.zarr"))
    led = L.PrivacyLedger.for_split(str(tmp_path / "s.zarr"), "train")
    led.charge(FIT, mechanism="privlin.fit/dp_adam", epsilon=1.5, delta=1e-5)
    led.charge(SWEEP, mechanism="privlin.sweep", epsilon=4, delta=1e-5)
    out = subprocess.run(
        [sys.executable, "-m", "privlin.ledger", str(tmp_path / "s.zarr"), "--delta", "1e-5"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "privlin.sweep" in out.stdout and "privlin.fit/dp_adam" in out.stdout
    total = _pld_direct([FIT, SWEEP], 1e-5)
    assert f"ε={total:.4g} at δ=1e-05" in out.stdout

def test_cli_json(tmp_path, capsys):
    from faults.inject import write_store

    write_store(str(tmp_path / "s.zarr"))
    led = L.PrivacyLedger.for_split(str(tmp_path / "s.zarr"), "train")
    led.charge(FIT, mechanism="privlin.fit/dp_adam", epsilon=1.5, delta=1e-5)
    assert ledger_main([str(tmp_path / "s.zarr"), "--json", "--delta", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and json.loads(out)["epsilon"] == pytest.approx(_pld_direct([FIT], 1e-5))
    assert ledger_main([str(tmp_path / "s.zarr" / "train")]) == 0
    out = capsys.readouterr().out
    assert "privlin.fit/dp_adam" in out and max(map(len, out.splitlines()[2:])) <= 120  # one short line per entry
    assert ledger_main([str(tmp_path / "empty")]) == 2  # a missing path: a mistake, as for `python -m stores`
    (tmp_path / "notes.txt").write_text("x")
    assert ledger_main([str(tmp_path / "notes.txt")]) == 2  # a file: the wording of `python -m stores`
    assert "is a file, not a feature store" in capsys.readouterr().err


def test_a_total_is_reported_at_the_caps_delta_else_the_smallest_entrys(tmp_path):
    """Without a cap the total is at the smallest δ of its entries (never their sum, which made a total read smaller
    than one of its own entries); with a cap, at the cap's δ.  Checked against dp-accounting composed directly."""
    led = L.PrivacyLedger(tmp_path / "l.json")
    led.charge(CENTER, mechanism="centering", epsilon=0.5, delta=1e-7)
    led.charge(SWEEP, mechanism="sweep", epsilon=4.0, delta=1e-5)
    led.charge(SWEEP, mechanism="sweep", epsilon=4.0, delta=3e-5)
    eps, delta = led.spent()
    assert delta == 1e-7
    assert eps == pytest.approx(_pld_direct([CENTER, SWEEP, SWEEP], 1e-7), rel=1e-9)
    assert eps >= max(_pld_direct([e], 1e-7) for e in (CENTER, SWEEP))  # never below one of its own entries
    assert f"ε={eps:.4g} at δ=1e-07" in led.summary()
    led.set_cap(100.0, 1e-6)
    eps, delta = led.spent()
    assert delta == 1e-6 and eps == pytest.approx(_pld_direct([CENTER, SWEEP, SWEEP], 1e-6), rel=1e-9)


def test_cli_shows_sets_lowers_and_raises_a_cap_with_a_note(tmp_path, capsys):
    from faults.inject import write_store

    url = str(tmp_path / "s.zarr")
    write_store(url)
    assert ledger_main([url, "--split", "train", "--set-cap", "2", "1e-5"]) == 0  # a first cap, nothing charged yet
    assert "cap: ε=2 at δ=1e-05" in capsys.readouterr().out
    led = L.PrivacyLedger.for_split(url, "train")
    led.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    assert ledger_main([url, "--split", "train", "--set-cap", "1.5", "1e-5"]) == 0  # lowering: no note needed
    capsys.readouterr()
    assert ledger_main([url, "--split", "train", "--set-cap", "5", "1e-5"]) == 2  # raising without a note
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a note" in err and led.path in err
    assert led.cap == (1.5, 1e-5)
    assert ledger_main([url, "--set-cap", "5", "1e-5", "--note", "approved by the data owner"]) == 0
    out = capsys.readouterr().out
    assert "cap: ε=5 at δ=1e-05" in out
    caps = [(r["body"]["epsilon"], r["body"]["note"]) for r in led.home.records() if r["kind"] == "cap"]
    assert caps == [(2.0, ""), (1.5, ""), (5.0, "approved by the data owner")]
    led.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    assert ledger_main([url, "--set-cap", "1", "1e-5"]) == 0

def test_an_in_memory_ledger_refuses_to_travel_and_a_file_ledger_pickles(tmp_path, blobs):
    import pickle

    from sklearn.model_selection import GridSearchCV

    mem = L.PrivacyLedger.in_memory()
    away = pickle.loads(pickle.dumps(mem))  # what another process gets: every use refuses with one line
    with pytest.raises(ValueError) as e:
        away.charge(FIT, mechanism="fit", epsilon=1.0, delta=1e-5)
    assert str(e.value).count("\n") == 0 and "in-memory ledger" in str(e.value) and hex(id(mem)) in str(e.value)
    assert len(mem) == 0
    on_file = L.PrivacyLedger(tmp_path / "l.json", cap=(9.0, 1e-5))
    on_file.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    back = pickle.loads(pickle.dumps(on_file))
    assert back.path == on_file.path and len(back) == 1 and back.cap == (9.0, 1e-5)
    X, y = blobs(40, seed=0)
    search = GridSearchCV(privlin.DPLinearClassifier(epsilon=1.0, classes=range(4), steps=2, ledger=mem),
                          {"epsilon": [1.0, 2.0]}, cv=2, n_jobs=2)
    with pytest.raises(ValueError) as e:  # the error the user reads last is ours, not joblib's PicklingError
        search.fit(X, y)
    assert str(e.value).count("\n") == 0 and "cannot be used in another process" in str(e.value)
    assert len(mem) == 0  # nothing was charged in a copy no one reads


# --------------------------------------------------------------------------- the ledger as policy


def test_the_cap_is_stored_and_binds_every_later_charge(tmp_path):
    p = tmp_path / "l.json"
    one = _pld_direct([FIT], 1e-5)
    L.PrivacyLedger(p, cap=(1.3 * one, 1e-5)).charge(FIT, mechanism="fit", epsilon=one, delta=1e-5)
    uncapped = L.PrivacyLedger(p)  # a later caller that passes no budget
    assert uncapped.cap == (1.3 * one, 1e-5)
    with pytest.raises(L.PrivacyBudgetExceeded, match="past the cap"):
        uncapped.charge(FIT, mechanism="fit", epsilon=one, delta=1e-5)
    with pytest.raises(L.PrivacyBudgetExceeded, match="raising a cap is an explicit act"):
        L.PrivacyLedger(p, cap=(100.0, 1e-5)).charge(FIT, mechanism="fit", epsilon=one, delta=1e-5)
    assert len(uncapped) == 1
    uncapped.set_cap(3 * one, 1e-5, note="approved by the data owner")  # the explicit, recorded act
    uncapped.charge(FIT, mechanism="fit", epsilon=one, delta=1e-5)
    doc = json.loads(p.read_text())
    assert [c["epsilon"] for c in doc["caps"]] == [1.3 * one, 3 * one]
    assert doc["caps"][1]["note"] == "approved by the data owner" and doc["neighbouring"] == "replace_special"
    L.PrivacyLedger(p, cap=(2.5 * one, 1e-5)).charge(ev.GaussianDpEvent(1e3), mechanism="tiny", epsilon=0.01,
                                                     delta=1e-5)  # lowering needs no ceremony
    assert L.PrivacyLedger(p).cap == (2.5 * one, 1e-5)


def test_substitution_fits_are_composed_as_substitution(blobs):
    """Three ε=4 replace_one fits under a cap of ε=4: the second is refused (the total is composed under
    REPLACE_ONE, not as if the entries were zero-out)."""
    X, y = blobs(200, seed=1)
    led = L.PrivacyLedger.in_memory(neighbouring="replace_one", cap=(4.0, 1e-5))
    kw = dict(epsilon=4.0, neighbouring="replace_one", classes=range(4), steps=5, ledger=led)
    m = privlin.DPLinearClassifier(**kw).fit(X, y)
    assert m.privacy_.neighbouring == "replace_one"
    assert _pld_direct([m.privacy_.dp_event], 1e-5, NeighboringRelation.REPLACE_ONE) == pytest.approx(4.0, rel=2e-3)
    with pytest.raises(L.PrivacyBudgetExceeded):
        privlin.DPLinearClassifier(**kw).fit(X, y)
    with pytest.raises(ValueError, match="do not compose"):  # a zero-out fit on a replace_one ledger
        privlin.DPLinearClassifier(epsilon=1.0, classes=range(4), steps=5, ledger=led).fit(X, y)
    assert len(led) == 1


# --------------------------------------------------------------------------- every path charges


@pytest.fixture
def store(make_store, blobs):
    X, y = blobs(120, d=8, k=2, seed=3)
    return make_store({"train": (X, y), "test": (X, y)})


def _ledger(store, split="train"):
    from privlin.data import as_source

    return as_source(store, split).ledger()


def test_two_fits_and_a_sweep_compose_to_the_ledger_total(store):
    from privlin.sweep import sweep

    m1 = privlin.fit(store, epsilon=1.0, classes=[0, 1], method="adam1", random_state=0)
    m2 = privlin.fit(store, epsilon=2.0, classes=[0, 1], method="sgd", steps=5, random_state=1)
    res = sweep(store, epsilon=[0.5, 1.0], classes=[0, 1], eval_split=None, random_state=2)
    led = _ledger(store)
    entries = led.entries
    assert [e.mechanism for e in entries] == ["DPLinearClassifier/adam1", "DPLinearClassifier/sgd", "privlin.sweep/sgd"]
    assert entries[0].event == m1.privacy_.dp_event and entries[1].event == m2.privacy_.dp_event
    expected = _pld_direct([m1.privacy_.dp_event, m2.privacy_.dp_event] + [r["plan"].dp_event() for r in res.records],
                           1e-5)
    assert led.spent(1e-5)[0] == pytest.approx(expected, rel=1e-6)
    assert m2.ledger_.path == led.path
    assert m2.privacy_.ledger_spent[0] == pytest.approx(_pld_direct([m1.privacy_.dp_event, m2.privacy_.dp_event],
                                                                     m2.privacy_.ledger_spent[1]), rel=1e-6)


def test_fit_past_the_budget_raises_and_reads_nothing(store, monkeypatch):
    import stores

    privlin.fit(store, epsilon=1.0, classes=[0, 1], method="adam1", budget=(1.2, 1e-5), random_state=0)
    reads = []
    for name in ("blocks", "to_numpy"):
        orig = getattr(stores.Split, name)
        monkeypatch.setattr(stores.Split, name,
                            lambda self, *a, _o=orig, _n=name, **k: (reads.append(_n), _o(self, *a, **k))[1])
    monkeypatch.setattr(stores.Split, "labels", property(lambda self: reads.append("labels")), raising=False)
    with pytest.raises(L.PrivacyBudgetExceeded):
        privlin.fit(store, epsilon=1.0, method="adam1", random_state=0)  # no budget, classes=None: still refused
    assert reads == []
    assert len(_ledger(store)) == 1


def test_a_fit_that_fails_public_checks_charges_nothing(store):
    with pytest.raises(ValueError, match="single step"):
        privlin.fit(store, epsilon=1.0, method="adam1", steps=3, classes=[0, 1])
    with pytest.raises(ValueError, match="random_state"):
        privlin.fit(store, epsilon=1.0, secure_mode=True, random_state=0, classes=[0, 1])
    assert len(_ledger(store)) == 0


def test_arrays_charge_a_given_ledger_and_budget(blobs):
    X, y = blobs(50, d=4, k=2, seed=1)
    led = L.PrivacyLedger.in_memory(cap=(2.5, 1e-5))
    privlin.fit((X, y), epsilon=2.0, classes=[0, 1], method="adam1", ledger=led, random_state=0)
    assert len(led) == 1
    with pytest.raises(L.PrivacyBudgetExceeded):
        privlin.fit((X, y), epsilon=2.0, classes=[0, 1], method="adam1", ledger=led, random_state=0)
    with pytest.raises(L.PrivacyBudgetExceeded):
        privlin.fit((X, y), epsilon=2.0, classes=[0, 1], method="adam1", budget=(1.0, 1e-5))
    m = privlin.fit((X, y), epsilon=2.0, classes=[0, 1], method="adam1", random_state=0)
    assert m.ledger_ is None and m.privacy_.ledger is None  # arrays without ledger or budget: nowhere to charge


def test_non_private_releases_are_charged_and_refused_under_a_cap(store):
    from privlin.knn import knn_accuracy
    from privlin.report import PrivacyLeakWarning

    with pytest.warns(PrivacyLeakWarning, match="NON-PRIVATE"):
        m = privlin.fit(store, epsilon=float("inf"), classes=[0, 1], method="sgd", steps=5, random_state=0)
    assert m.privacy_.epsilon == float("inf") and m.privacy_.accountant == "none"
    assert set(m.privacy_.noise_multipliers.values()) == {0.0}
    assert "NON-PRIVATE" in str(m.privacy_) and m.privacy_.leaks
    assert _ledger(store).spent(1e-5)[0] == float("inf")  # recorded: the split has no privacy left
    knn_accuracy(store["train"], store["test"], k=3)
    assert _ledger(store).entries[-1].mechanism == "privlin.knn/accuracy"
    assert _ledger(store, "test").entries[-1].mechanism == "privlin.knn/accuracy (test side)"  # its rows pay too
    before = len(_ledger(store, "test"))
    with pytest.raises(L.PrivacyBudgetExceeded):  # any cap refuses them, before reading anything
        privlin.fit(store, epsilon=float("inf"), classes=[0, 1], budget=(100.0, 1e-5))
    with pytest.raises(L.PrivacyBudgetExceeded):
        knn_accuracy(store["test"], store["train"], budget=(100.0, 1e-5))
    assert len(_ledger(store, "test")) == before


def test_a_budget_of_what_a_non_private_read_spent_is_refused_in_one_line_and_a_finite_one_binds(store):
    """After a non-private read the split's total is ∞ (the quickstart's k-NN baseline does this to digits): a fit's
    report says why its total is ∞; a budget of that total is one ValueError naming the cap, not a JSON error from the ledger home's write, and
    nothing is recorded; a finite budget under the total refuses the fit before it reads a row."""
    from privlin.knn import knn_accuracy

    knn_accuracy(store["train"], store["test"], k=3)
    spent, delta = _ledger(store).spent(delta=1e-5)
    assert spent == float("inf")
    m = privlin.fit(store, epsilon=1, classes=[0, 1], method="sgd", steps=5, random_state=0)  # no budget: runs
    line = [t for t in str(m.privacy_).splitlines() if "total spent on these rows" in t]
    assert len(line) == 1 and "ε=inf" in line[0] and "∞: a release without noise read them" in line[0], line
    before = len(_ledger(store))
    with pytest.raises(ValueError, match=r"^cap must have a finite epsilon") as e:
        privlin.fit(store, epsilon=1, classes=[0, 1], budget=(spent, delta))
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="finite epsilon"):
        L.PrivacyLedger.in_memory(cap=(float("nan"), 1e-5))
    with pytest.raises(L.PrivacyBudgetExceeded, match="past the cap"):
        privlin.fit(store, epsilon=1, classes=[0, 1], budget=(1.0, 1e-5))
    assert len(_ledger(store)) == before and _ledger(store).cap == (1.0, 1e-5)


def test_a_probe_on_features_of_the_dp_trained_backbones_own_images_composes_with_its_training(tmp_path):
    """vip_toy_dp was DP-trained on digits/train: a store of digits/train features from it carries that run's
    dp_event, and the split's ledger charges it (once) before the first probe, so the total covers both."""
    import featurize
    from dp_accounting.rdp import rdp_privacy_accountant
    from privlin.data import as_source
    from privlin.events import event_from_dict

    weights = os.path.join(ROOT, "backbones", "weights", "vip_toy_dp.pth")
    out = str(tmp_path / "dp.zarr")
    featurize.extract("vip_toy", "digits", splits=["train"], out=out, weights=weights, device="cpu", num_workers=0,
                      progress=False)
    meta = json.load(open(os.path.join(ROOT, "backbones", "weights", "vip_toy_dp.json")))
    backbone_event = event_from_dict(meta["privacy"]["dp_event"])
    m = privlin.fit(out, epsilon=1.0, random_state=0)
    led = as_source(out, "train").ledger()
    assert [e.mechanism for e in led.entries] == ["backbone DP training (DP-MAE)", "DPLinearClassifier/sgd"]
    privlin.fit(out, epsilon=1.0, random_state=1)
    assert [e.mechanism for e in led.entries].count("backbone DP training (DP-MAE)") == 1  # charged once
    acc = pld_privacy_accountant.PLDAccountant(NeighboringRelation.REPLACE_SPECIAL)
    for e in (backbone_event, m.privacy_.dp_event, m.privacy_.dp_event):
        acc.compose(e)
    assert led.spent(1e-5)[0] == pytest.approx(acc.get_epsilon(1e-5), rel=2e-3)
    rdp = rdp_privacy_accountant.RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_SPECIAL)
    assert meta["privacy"]["epsilon"] == pytest.approx(rdp.compose(backbone_event).get_epsilon(1e-5), rel=1e-9)


def test_a_privacy_record_of_other_weights_is_refused(tmp_path):
    import shutil

    from backbones.build import weights_privacy

    src = os.path.join(ROOT, "backbones", "weights")
    shutil.copy(os.path.join(src, "vip_toy.pth"), tmp_path / "w.pth")
    shutil.copy(os.path.join(src, "vip_toy_dp.json"), tmp_path / "w.json")  # the record of other weights
    with pytest.raises(ValueError, match="does not belong to these weights"):
        weights_privacy(tmp_path / "w.pth", "0" * 64)
    assert weights_privacy(os.path.join(src, "vip_toy.pth"), "x") is None  # non-private weights: nothing to charge


def test_summary_names_how_it_composed_and_the_gdp_total_is_the_closed_form():
    """Full-batch Gaussians compose exactly (μ = √Σσ⁻²): the total solves the GDP δ(ε) curve; a Poisson entry: PLD."""
    led = L.PrivacyLedger.in_memory()
    led.charge(FIT, mechanism="fit", epsilon=1.0, delta=1e-5)
    led.charge(CENTER, mechanism="center", epsilon=0.3, delta=1e-5)
    eps, _ = led.spent(1e-5)
    assert closed_forms.gdp_delta(closed_forms.mu_of([3.0, 10.0]), eps) == pytest.approx(1e-5, rel=1e-6)
    assert "total (exact GDP composition of 2 entries)" in led.summary(1e-5)
    led.charge(SWEEP, mechanism="sweep", epsilon=4.0, delta=1e-5)
    assert "total (PLD composition of 3 entries)" in led.summary(1e-5)
