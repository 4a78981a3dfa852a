"""The ledger is evidence: a store's ledger file from before the ledger home, deleted, emptied, truncated or edited,
fails its import with a named error (it never resets a split's budget); a deleted lock loses no entry; one total,
with its δ, everywhere."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from dp_accounting.dp_event import GaussianDpEvent

import privlin
from privlin.data import as_source
from privlin.ledger import LEDGER_FILENAME, LedgerDamaged, LedgerEntry, PrivacyBudgetExceeded

from .inject import write_store

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def legacy_charge(url, n=2):
    """Two fits charged as stores kept them before the ledger home: a ledger file beside the split, anchored in the
    split's sealed metadata (the route this change replaced, still how such a file is read for its import)."""
    from privlin.ledger.core import PrivacyLedger, StoreAnchor, ledger_path

    led = PrivacyLedger(ledger_path(url, "train"), anchor=StoreAnchor(url, "train"))
    for i in range(n):
        led.charge(GaussianDpEvent(5.0), mechanism="DPLinearClassifier/adam1", epsilon=0.9, delta=1e-5)


@pytest.fixture
def charged(tmp_path):
    """A store whose train split was charged twice in a ledger file of its own (before the home), not imported yet."""
    url = str(tmp_path / "s.zarr")
    write_store(url)
    legacy_charge(url)
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
        legacy_charge(other, 1)
        os.replace(os.path.join(other, "train", LEDGER_FILENAME), path)
    with pytest.raises((LedgerDamaged, ValueError)) as e:
        _fit(url)
    assert str(e.value).count("\n") == 0 and ("ledger" in str(e.value))
    assert path in str(e.value) or os.path.realpath(path) in str(e.value)


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

    assert main([url, "--json"]) == 0
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


def test_for_split_needs_a_store(tmp_path):
    from privlin.ledger import PrivacyLedger

    with pytest.raises(FileNotFoundError, match="no feature store"):
        PrivacyLedger.for_split(str(tmp_path / "none.zarr"), "train")


def test_a_hand_edited_ledger_chained_to_the_anchor_is_refused(charged):
    """Every entry and cap dropped, ``head`` recomputed, ``previous`` set to the anchored head: the anchor commits to
    its entry count and prefix, so this is not the crash window and the budget is not reset."""
    import stores.anchor
    from privlin.ledger.document import _head

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


@pytest.mark.parametrize("damage,named", [
    ("delete split document", "train/zarr.json"),
    ("truncate split document", "train/zarr.json"),
    ("split document not an object", "train/zarr.json"),
    ("flip split attributes", "train/zarr.json"),
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


def test_an_anchor_written_before_it_committed_to_its_prefix_still_refuses_a_reset(charged):
    """Stores anchored by the earlier format (``entries`` and ``head`` only): the ledger they anchor reads, one
    write past them reads (the crash window), a ledger emptied and chained to them does not; the next charge writes
    the full anchor."""
    import stores.anchor
    from privlin.ledger.document import _head

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
    assert len(as_source(url, "train").ledger()) == 3
