"""The ledger is evidence: a deleted, emptied, truncated or edited ledger fails closed with a named error (it never
resets a split's budget); a deleted lock loses no entry; a crash between the ledger and its anchor is recovered;
one total, with its δ, everywhere."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import privlin
from privlin.data import as_source
from privlin.ledger import LEDGER_FILENAME, LedgerDamaged, LedgerEntry, PrivacyBudgetExceeded

from .inject import write_store

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def charged(tmp_path):
    """A store whose train split has been charged twice (classes: the store's published list)."""
    url = str(tmp_path / "s.zarr")
    write_store(url)
    for seed in (0, 1):
        privlin.fit(url, epsilon=1.0, method="adam1", random_state=seed)
    return url, os.path.join(url, "train", LEDGER_FILENAME)


def _fit(url):
    return privlin.fit(url, epsilon=1.0, method="adam1", random_state=2)


def _edit(path, fn):
    doc = json.load(open(path))
    fn(doc)
    json.dump(doc, open(path, "w"))


@pytest.mark.parametrize("damage", ["delete", "null", "empty list", "drop last entry", "NoOp event", "sigma bit",
                                    "raise cap", "truncate", "swap for another split's"])
def test_a_damaged_ledger_fails_closed_and_names_itself(charged, tmp_path, damage):
    url, path = charged
    if damage == "delete":
        os.remove(path)
    elif damage == "null":
        open(path, "w").write("null")
    elif damage == "empty list":
        _edit(path, lambda d: d["entries"].clear())
    elif damage == "drop last entry":
        _edit(path, lambda d: d["entries"].pop())
    elif damage == "NoOp event":
        _edit(path, lambda d: d["entries"][0].__setitem__("event", {"type": "NoOpDpEvent"}))
    elif damage == "sigma bit":  # one flipped bit in a recorded σ (the spend under-counted)
        def flip(node):
            if "noise_multiplier" in node:
                node["noise_multiplier"] = float(np.nextafter(node["noise_multiplier"], np.inf))
                return True
            return any(flip(v) for v in node.values() if isinstance(v, dict)) or any(
                flip(v) for lst in node.values() if isinstance(lst, list) for v in lst if isinstance(v, dict))
        _edit(path, lambda d: flip(d["entries"][0]["event"]))
    elif damage == "raise cap":
        _edit(path, lambda d: d["caps"].append({"epsilon": 1e9, "delta": 0.1, "time": "", "note": "edited"}))
    elif damage == "truncate":
        data = open(path).read()
        open(path, "w").write(data[: len(data) // 2])
    elif damage == "swap for another split's":
        other = str(tmp_path / "o.zarr")
        write_store(other)
        privlin.fit(other, epsilon=1.0, method="adam1", random_state=0)
        os.replace(os.path.join(other, "train", LEDGER_FILENAME), path)
    with pytest.raises((LedgerDamaged, ValueError)) as e:
        _fit(url)
    assert str(e.value).count("\n") == 0 and ("ledger" in str(e.value))
    assert path in str(e.value) or os.path.realpath(path) in str(e.value)


def test_a_crash_between_the_ledger_and_its_anchor_is_recovered(charged, monkeypatch):
    url, path = charged
    import stores.anchor

    real = stores.anchor.set_ledger_anchor

    def crash(*a, **k):
        raise OSError("killed between the two writes")

    monkeypatch.setattr(stores.anchor, "set_ledger_anchor", crash)
    with pytest.raises(OSError):
        _fit(url)  # the ledger file has the new entry; the store still records the one before
    monkeypatch.setattr(stores.anchor, "set_ledger_anchor", real)
    led = as_source(url, "train").ledger()
    assert len(led) == 3  # the charge stands (its noise may have been released): the safe side
    _fit(url)
    assert len(as_source(url, "train").ledger()) == 4 and stores.anchor.ledger_anchor(url, "train")["entries"] == 4


def test_a_deleted_lock_loses_no_entry(tmp_path):
    """Four processes charge one split while a fifth deletes every lock file it can find: no entry is lost (the
    lock is the split's folder itself)."""
    url = str(tmp_path / "s.zarr")
    write_store(url)
    worker = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {ROOT!r})
        from dp_accounting import dp_event as ev
        from privlin.data import as_source
        led = as_source({url!r}, "train").ledger()
        for i in range(6):
            led.charge(ev.GaussianDpEvent(50.0), mechanism=f"w{{sys.argv[1]}}-{{i}}", epsilon=0.1, delta=1e-9)
    """)
    deleter = textwrap.dedent(f"""
        import glob, os, time
        end = time.time() + 20
        while time.time() < end:
            for f in glob.glob({os.path.join(url, '**', '*.lock')!r}, recursive=True):
                try: os.remove(f)
                except OSError: pass
    """)
    d = subprocess.Popen([sys.executable, "-c", deleter])
    procs = [subprocess.Popen([sys.executable, "-c", worker, str(k)]) for k in range(4)]
    assert [p.wait(timeout=300) for p in procs] == [0] * 4
    d.kill()
    entries = as_source(url, "train").ledger().entries
    assert sorted(e.mechanism for e in entries) == sorted(f"w{k}-{i}" for k in range(4) for i in range(6))


def test_one_total_with_its_delta_everywhere(charged, capsys):
    url, path = charged
    with pytest.raises(PrivacyBudgetExceeded) as e:
        privlin.fit(url, epsilon=1.0, method="adam1", budget=(1.5, 1e-5))
    led = as_source(url, "train").ledger()
    eps, delta = led.spent()
    assert delta == 1e-5 and f"spent ε={eps:.4g} at δ=1e-05" in str(e.value)
    from privlin.ledger.__main__ import main

    assert main([path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["epsilon"] == pytest.approx(eps) and out["delta"] == 1e-5
    m = privlin.fit(url, epsilon=0.1, method="adam1", random_state=0)
    assert m.privacy_.ledger_spent == led.spent()


def test_charges_through_for_split_keep_the_store_anchor(charged, digits):
    """README's route: array fits charged on ``PrivacyLedger.for_split(store, "train")``, then a store fit on the same
    split.  Every charge must move the split's anchor, or the next store fit reads its own ledger as damaged."""
    from privlin.ledger import PrivacyLedger

    url, _ = charged
    Xtr, _, ytr, _ = digits
    for seed in range(3):
        privlin.DPLinearClassifier(epsilon=1.0, method="adam1", classes=range(10), random_state=seed,
                                   ledger=PrivacyLedger.for_split(url, "train")).fit(Xtr, ytr)
    _fit(url)
    assert len(as_source(url, "train").ledger()) == 2 + 3 + 1


def test_for_split_beside_no_store_has_no_anchor(tmp_path):
    from privlin.ledger import PrivacyLedger

    led = PrivacyLedger.for_split(str(tmp_path / "none.zarr"), "train")
    led.charge(privlin.accounting.dp_event(2.0), mechanism="fit", epsilon=1.0, delta=1e-5)
    assert len(PrivacyLedger.for_split(str(tmp_path / "none.zarr"), "train")) == 1


def test_a_hand_edited_ledger_chained_to_the_anchor_is_refused(charged):
    """Every entry and cap dropped, ``head`` recomputed, ``previous`` set to the anchored head: the anchor commits to
    its entry count and prefix, so this is not the crash window and the budget is not reset."""
    import stores.anchor
    from privlin.ledger import _head

    url, path = charged
    anchored = stores.anchor.ledger_anchor(url, "train")
    assert anchored["entries"] == 2
    original = open(path).read()

    def reset(d):
        d["entries"], d["caps"], d["previous"] = [], [], anchored["head"]
        d["head"] = _head(d["previous"], d["neighbouring"], [], [])

    _edit(path, reset)
    with pytest.raises(LedgerDamaged) as e:
        _fit(url)
    assert str(e.value).count("\n") == 0 and path in str(e.value)

    def rewrite_prefix(d):  # one entry more than anchored, chained to the anchor, but the anchored prefix changed
        d["entries"] = [d["entries"][0]] * 3
        d["previous"] = anchored["head"]
        d["head"] = _head(d["previous"], d["neighbouring"], d["caps"], [LedgerEntry.from_dict(x) for x in d["entries"]])

    open(path, "w").write(original)
    _edit(path, rewrite_prefix)
    with pytest.raises(LedgerDamaged, match="privacy ledger .*" + LEDGER_FILENAME):
        _fit(url)


def test_a_crash_inside_the_anchor_move_verifies_clean(charged, monkeypatch, capsys):
    """Killed between the split's document and the consolidated copy: the store is healthy, verify says ok (with a
    note, not CORRUPT), the ledger reads, and the next charge moves both."""
    import stores.anchor
    from stores.__main__ import main as stores_cli

    url, _ = charged

    def killed(store):
        raise OSError("killed before the consolidated copy was written")

    monkeypatch.setattr(stores.anchor, "consolidate", killed)
    with pytest.raises(OSError, match="killed"):
        _fit(url)
    monkeypatch.undo()
    assert stores_cli(["verify", url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok:") and "note: split 'train'" in out and "anchor" in out
    assert len(as_source(url, "train").ledger()) == 3
    _fit(url)
    assert stores_cli(["verify", url]) == 0 and "note" not in capsys.readouterr().out
    assert len(as_source(url, "train").ledger()) == 4


@pytest.mark.parametrize("damage,named", [
    ("delete split document", "train/zarr.json"),
    ("truncate split document", "train/zarr.json"),
    ("split document not an object", "train/zarr.json"),
    ("flip split attributes", "train/zarr.json"),
    ("truncate labels document", "train/labels/zarr.json"),
])
def test_split_metadata_damage_reaches_fit_as_one_named_line(charged, damage, named):
    import stores
    from .inject import flip_in_text, truncate

    url, _ = charged
    doc = os.path.join(url, named)
    if damage.startswith("delete"):
        os.remove(doc)
    elif damage.startswith("truncate"):
        truncate(doc, 40)
    elif damage.endswith("not an object"):
        open(doc, "w").write("[1, 2]")
    else:
        flip_in_text(doc, '"n_rows": 300', len('"n_rows": '))
    with pytest.raises(stores.CorruptStoreError) as e:
        _fit(url)
    assert str(e.value).count("\n") == 0 and named in str(e.value), str(e.value)
    if named == "train/zarr.json":  # the ledger's command line names it too (it reads through the anchor)
        r = subprocess.run([sys.executable, "-m", "privlin.ledger", url, "--split", "train"], capture_output=True,
                           text=True, cwd=ROOT, timeout=300)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and named in r.stderr, r.stderr


def test_a_split_document_restored_from_a_lagging_copy_still_reads_its_ledger(charged, monkeypatch):
    """The worst order of the two faults: a charge killed before the consolidated copy moved (its anchor one charge
    behind), then the split's zarr.json deleted.  Repair restores the document from that copy; the ledger, one write
    past the restored anchor, extends it and is accepted; the next fit moves the anchor again."""
    import stores.anchor
    import stores.repair

    url, _ = charged
    monkeypatch.setattr(stores.anchor, "consolidate", lambda store: (_ for _ in ()).throw(OSError("killed")))
    with pytest.raises(OSError, match="killed"):
        _fit(url)
    monkeypatch.undo()
    os.remove(os.path.join(url, "train", "zarr.json"))
    assert any("restored train/zarr.json" in a for a in stores.repair.repair(url))
    assert stores.anchor.ledger_anchor(url, "train")["entries"] == 2  # the copy's anchor: one charge behind
    assert len(as_source(url, "train").ledger()) == 3
    _fit(url)
    assert stores.anchor.ledger_anchor(url, "train")["entries"] == 4


def test_an_anchor_written_before_it_committed_to_its_prefix_still_refuses_a_reset(charged):
    """Stores anchored by the earlier format (``entries`` and ``head`` only): the ledger they anchor reads, one
    write past them reads (the crash window), a ledger emptied and chained to them does not; the next charge writes
    the full anchor."""
    import stores.anchor
    from privlin.ledger import _head

    url, path = charged
    full = stores.anchor.ledger_anchor(url, "train")
    stores.anchor.set_ledger_anchor(url, "train", {"entries": full["entries"], "head": full["head"]})
    assert len(as_source(url, "train").ledger()) == 2
    original = open(path).read()

    def reset(d):
        d["entries"], d["caps"], d["previous"] = [], [], full["head"]
        d["head"] = _head(d["previous"], d["neighbouring"], [], [])

    _edit(path, reset)
    with pytest.raises(LedgerDamaged, match=LEDGER_FILENAME):
        _fit(url)
    open(path, "w").write(original)
    _fit(url)
    assert set(stores.anchor.ledger_anchor(url, "train")) == {"entries", "caps", "head", "previous"}
