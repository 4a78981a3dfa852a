"""The privacy ledger: PLD totals equal dp-accounting's, caps refuse, concurrent writers lose nothing."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
from dp_accounting import NeighboringRelation
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant

from privlin import ledger as L

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FIT = ev.GaussianDpEvent(3.0)
CENTER = ev.GaussianDpEvent(10.0)
SWEEP = ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(1.5)), 10)


def _pld_direct(events, delta):
    acc = pld_privacy_accountant.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE)
    for e in events:
        acc.compose(e)
    return acc.get_epsilon(delta)


def test_event_round_trip_nested():
    e = ev.ComposedDpEvent([FIT, SWEEP, ev.NonPrivateDpEvent()])
    d = L.event_to_dict(e)
    assert json.loads(json.dumps(d)) == d
    assert L.event_from_dict(d) == e


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
        L.event_from_dict(bad)


def test_two_fits_and_a_sweep_total_equals_dp_accounting(tmp_path):
    store = tmp_path / "feat.zarr"
    led = L.PrivacyLedger.for_split(str(store), "train")
    assert led.path == str(store) + "/train/" + L.LEDGER_FILENAME
    led.charge(CENTER, mechanism="private_centering", epsilon=0.5, delta=1e-6)
    led.charge(FIT, mechanism="privlin.fit/dp_adam", epsilon=1.5, delta=1e-5)
    led.charge(FIT, mechanism="privlin.fit/dp_adam", epsilon=1.5, delta=1e-5)
    led.charge(SWEEP, mechanism="privlin.sweep", epsilon=4.0, delta=1e-5, params={"lr": [0.1, 1.0]})
    # a fresh object on the same path sees the same history
    again = L.PrivacyLedger.for_split(str(store), "train")
    assert [e.mechanism for e in again.entries] == ["private_centering", "privlin.fit/dp_adam",
                                                    "privlin.fit/dp_adam", "privlin.sweep"]
    eps, delta = again.spent(1e-5)
    assert delta == 1e-5
    assert eps == pytest.approx(_pld_direct([CENTER, FIT, FIT, SWEEP], 1e-5), rel=1e-9)
    # composition is better than adding the parts, worse than any single part
    parts = [_pld_direct([e], 1e-5) for e in (CENTER, FIT, FIT, SWEEP)]
    assert max(parts) < eps < sum(parts)
    # default delta: sum of the entries' deltas
    assert again.spent()[1] == pytest.approx(1e-6 + 3e-5)


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
    led = L.PrivacyLedger.for_split("memory://ledger-test/store.zarr", "test")
    led.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    assert len(L.PrivacyLedger("memory://ledger-test/store.zarr/test/privacy_ledger.json")) == 1


def test_crash_during_write_keeps_the_old_file(tmp_path, monkeypatch):
    p = tmp_path / "l.json"
    led = L.PrivacyLedger(p)
    led.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    before = p.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(L.os, "fsync", boom)
    with pytest.raises(OSError):
        led.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    assert p.read_bytes() == before
    assert [f for f in os.listdir(tmp_path) if f.endswith(".tmp")] == []


def test_mixed_relations_refuse_to_compose(tmp_path):
    p = tmp_path / "l.json"
    L.PrivacyLedger(p, neighbouring="replace_one").charge(FIT, mechanism="a", epsilon=1, delta=1e-5)
    with pytest.raises(ValueError, match="do not compose"):
        L.PrivacyLedger(p).spent(1e-5)


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


def test_concurrent_processes_lose_no_entry(tmp_path):
    path = str(tmp_path / "store" / "train" / L.LEDGER_FILENAME)
    n_proc, n_each = 4, 8
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {ROOT!r})
        from dp_accounting import dp_event as ev
        from privlin.ledger import PrivacyLedger
        led = PrivacyLedger({path!r})
        for i in range(n_each):
            led.charge(ev.GaussianDpEvent(5.0), mechanism=f"w{{sys.argv[1]}}-{{i}}", epsilon=1, delta=1e-6, check=False)
        """
    ).replace("n_each", str(n_each))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(k)]) for k in range(n_proc)]
    assert [p.wait(timeout=120) for p in procs] == [0] * n_proc
    entries = L.PrivacyLedger(path).entries
    assert len(entries) == n_proc * n_each
    assert len({e.id for e in entries}) == n_proc * n_each
    assert {e.mechanism for e in entries} == {f"w{k}-{i}" for k in range(n_proc) for i in range(n_each)}


def test_cli_prints_history_and_total(tmp_path):
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
    led = L.PrivacyLedger.for_split(str(tmp_path / "s.zarr"), "train")
    led.charge(FIT, mechanism="privlin.fit/dp_adam", epsilon=1.5, delta=1e-5)
    assert L.main([led.path, "--json", "--delta", "1e-5"]) == 0
    assert json.loads(capsys.readouterr().out)["epsilon"] == pytest.approx(_pld_direct([FIT], 1e-5))
    assert L.main([str(tmp_path / "s.zarr"), "--split", "train"]) == 0
    assert "privlin.fit/dp_adam" in capsys.readouterr().out
    assert L.main([str(tmp_path / "empty")]) == 1


@pytest.mark.parametrize("where", ["local", "memory"])
def test_ledger_for_real_store_splits(tmp_path, where):
    import numpy as np

    import stores

    url = str(tmp_path / "s.zarr") if where == "local" else "memory://ledger-for/s.zarr"
    w = stores.create_split(url, "train", n_rows=4, dim=3, dtype="float32", shard_rows=4)
    w.write_shard(0, np.ones((4, 3), np.float32), np.zeros(4, np.int64), np.array(list("abcd")))
    w.finalize()
    st = stores.open(url)
    by_split = L.ledger_for(st["train"])
    by_store = L.ledger_for(st, "train")
    by_url = L.ledger_for(url, "train")
    by_split.charge(FIT, mechanism="fit", epsilon=1.5, delta=1e-5)
    assert len(by_store) == len(by_url) == 1
    assert by_url.path.endswith("/train/" + L.LEDGER_FILENAME)
    # the store still reads and verifies with the ledger beside its split
    st = stores.open(url)
    st.verify()
    assert len(st["train"]) == 4
    with pytest.raises(ValueError, match="split"):
        L.ledger_for(st)


def test_ledger_for_arrays_is_in_memory():
    import numpy as np

    led = L.ledger_for(np.zeros((3, 2)), cap=(1.0, 1e-5))
    assert led.path is None and led.cap == (1.0, 1e-5)
    shared = L.PrivacyLedger.in_memory()
    assert L.ledger_for(np.zeros(2), ledger=shared) is shared
