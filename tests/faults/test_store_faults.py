"""Store damage of every kind: a named one-line error from reads, ``verify`` and the CLI; ``repair`` + rerun
gives back the very same store."""
import contextlib
import functools
import io
import json
import os
import re
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest
import zarr

import stores
import stores.anchor
from stores import location
from stores.__main__ import main as stores_cli

from .inject import (PROGRESS, assert_same_store, copy_over, error_line, flip_bit, flip_in_text, rows, swap,
                     truncate, write_store)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    path = tmp_path_factory.mktemp("ref") / "s.zarr"
    write_store(path)
    return path


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "s.zarr"
    write_store(path)
    return path


def t(*parts):
    return os.path.join(*map(str, parts))


# fault name -> (inject(store path), damaged shards named by the error)
CHUNK_FAULTS = {
    "features chunk deleted": (lambda p: os.unlink(t(p, "train/features/c/2/0")), {2}),
    "labels chunk deleted": (lambda p: os.unlink(t(p, "train/labels/c/2")), {2}),
    "valid chunk deleted": (lambda p: os.unlink(t(p, "train/valid/c/2")), {2}),
    "ids chunk deleted": (lambda p: os.unlink(t(p, "train/ids/c/2")), {2}),
    "features shard emptied (0 bytes)": (lambda p: truncate(t(p, "train/features/c/3/0"), 0), {3}),
    "features shard cut short": (lambda p: truncate(t(p, "train/features/c/3/0"), 1000), {3}),
    "features shards swapped": (lambda p: swap(t(p, "train/features/c/1/0"), t(p, "train/features/c/2/0")), {1, 2}),
    "labels chunks swapped": (lambda p: swap(t(p, "train/labels/c/1"), t(p, "train/labels/c/2")), {1, 2}),
    "features chunk copied over another": (lambda p: copy_over(t(p, "train/features/c/0/0"),
                                                               t(p, "train/features/c/1/0")), {1}),
    "flipped bit in features": (lambda p: flip_bit(t(p, "train/features/c/4/0")), {4}),
    "flipped bit in valid": (lambda p: flip_bit(t(p, "train/valid/c/0"), 5), {0}),
    "manifest deleted": (lambda p: os.unlink(t(p, "train/manifests/3")), {3}),
    "flipped bit in a manifest": (lambda p: flip_in_text(t(p, "train/manifests/3"), '"size"', 9), {3}),
    "manifest copied over another": (lambda p: copy_over(t(p, "train/manifests/0"), t(p, "train/manifests/3")), {3}),
    "flipped bit in a done mark": (lambda p: flip_bit(t(p, "train/done/c/2"), 0), {2}),
}


def cli(*args, process=False):
    """``python -m stores ARGS``: in this process (fast), or in a real one."""
    if process:
        return subprocess.run([sys.executable, "-m", "stores", *map(str, args)], capture_output=True, text=True,
                              cwd=ROOT, timeout=300)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = stores_cli(list(map(str, args)))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.mark.parametrize("fault", list(CHUNK_FAULTS))
def test_chunk_damage_is_named_then_repair_and_rerun_restore_the_store(store, reference, fault, capsys):
    inject, shards = CHUNK_FAULTS[fault]
    inject(store)
    st = stores.open(store)
    with pytest.raises(stores.CorruptStoreError) as e:
        st.verify()
    assert e.value.split == "train" and e.value.shard in shards, str(e.value)
    assert f"shard {e.value.shard}" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(stores.CorruptStoreError, match="split 'train', shard [0-9]"):
        sp = st["train"]
        sp.to_numpy(), sp.ids[:]  # never zeros, dropped rows, label -1 or empty ids
    assert stores_cli(["verify", str(store)]) == 1
    err = capsys.readouterr().err
    line = error_line(err)
    assert "CORRUPT" in line and "shard" in line

    assert stores_cli(["repair", str(store)]) == 0
    assert f"cleared damaged shard(s) {sorted(shards)}" in capsys.readouterr().out
    with pytest.raises(stores.IncompleteStoreError, match=re.escape(f"first: {sorted(shards)}")):
        stores.open(store)["train"].to_numpy()
    write_store(store)  # the job, rerun: redoes exactly the cleared shards
    assert_same_store(store, reference)
    stores.open(store).verify()


def test_progress_of_a_slow_verify_leaves_its_one_error_line(store, monkeypatch):
    """On a loaded box ``verify`` shows its progress (``cliconv.status``) before the error: here the progress is
    forced to show at once and the check waits until it is on stderr; the error is still the one line read, and
    :func:`error_line` refuses a second error line or a traceback."""
    import cliconv
    import stores.__main__ as stores_main

    os.unlink(t(store, "train/features/c/2/0"))
    err = io.StringIO()
    real_open = stores_main.open_store

    def open_once_progress_is_shown(path):
        deadline = time.monotonic() + 60
        while " ..." not in err.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        return real_open(path)

    monkeypatch.setattr(cliconv, "status", functools.partial(cliconv.status, after=0.0))
    monkeypatch.setattr(stores_main, "open_store", open_once_progress_is_shown)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert stores_cli(["verify", str(store)]) == 1
    text = err.getvalue()
    shown = [line for line in text.splitlines() if PROGRESS.fullmatch(line)]
    assert shown[0] == f"verifying every shard of {store} ..." and len(shown) == 2, text  # shown, then its time
    assert text.count("\n") == 3, text
    line = error_line(text)
    assert line.startswith("CORRUPT") and "shard 2" in line, text
    for bad in (text + line + "\n", text + "Traceback (most recent call last):\n"):
        with pytest.raises(AssertionError):
            error_line(bad)


def test_deleted_done_mark_is_a_shard_to_redo(store, reference):
    os.unlink(t(store, "train/done/c/3"))
    with pytest.raises(stores.IncompleteStoreError, match=r"1 of 5 shards not written \(first: \[3\]\)"):
        stores.open(store)["train"].to_numpy()
    with pytest.raises(stores.StoreError, match="first: \\[3\\]"):
        stores.open(store).verify()
    assert write_store(store).pending() == []
    assert_same_store(store, reference)


def test_a_split_whose_creation_was_cut_short_is_named_and_resumed(tmp_path, reference, capsys):
    """kill -9 between creating the split's group and its arrays: no 60 s wait, no KeyError 'done'."""
    path = tmp_path / "s.zarr"
    write_store(path, finalize=False, shards=[])
    for array in ("done", "valid"):
        for f in os.listdir(t(path, "train", array)):
            os.unlink(t(path, "train", array, f))
        os.rmdir(t(path, "train", array))
    assert stores_cli(["info", str(path)]) == 0
    assert "not fully created (arrays ['valid', 'done'] missing" in capsys.readouterr().out
    assert stores_cli(["verify", str(path)]) == 1
    err = capsys.readouterr().err
    line = error_line(err)
    assert line.startswith("INCOMPLETE") and "rerun the extraction job" in line
    write_store(path)
    assert_same_store(path, reference)


def test_n_rows_flipped_in_the_consolidated_copy_is_caught_and_repaired(store, reference):
    flip_in_text(t(store, "zarr.json"), '"n_rows": 300', len('"n_rows": '))  # '3' -> '2': one bit, 300 -> 200
    assert '"n_rows": 200' in open(t(store, "zarr.json")).read()
    with pytest.raises(stores.CorruptStoreError, match="split 'train'.*checksum"):
        stores.open(store)["train"]
    r = cli("verify", store, process=True)
    assert r.returncode == 1 and "train" in error_line(r.stderr)
    r = cli("repair", store, process=True)
    assert r.returncode == 0 and "consolidated metadata written again" in r.stdout, r.stderr
    X, y = stores.open(store)["train"].to_numpy()
    X0, y0, _ = rows()
    assert np.array_equal(X, X0) and np.array_equal(y, y0) and set(y) == {0, 1, 2}
    assert_same_store(store, reference)


def test_flipped_split_document_is_restored_from_its_sound_copy(store, reference):
    flip_in_text(t(store, "train/zarr.json"), '"n_rows": 300', len('"n_rows": '))
    with pytest.raises(stores.CorruptStoreError, match="consolidated copy"):
        stores.open(store).verify()
    assert "restored train/zarr.json" in "\n".join(stores.repair.repair(store))
    assert_same_store(store, reference)


def test_flipped_split_document_without_a_copy_cannot_be_repaired(tmp_path):
    write_store(tmp_path / "s.zarr", finalize=False, shards=[0, 1])  # a job still running: nothing consolidated
    flip_in_text(t(tmp_path, "s.zarr/train/zarr.json"), '"n_rows": 300', len('"n_rows": '))
    with pytest.raises(stores.CorruptStoreError, match="split 'train' .*checksum"):
        stores.open(tmp_path / "s.zarr")["train"]
    with pytest.raises(stores.CorruptStoreError, match="split 'train'.*checksum"):
        write_store(tmp_path / "s.zarr")  # the job refuses before writing anything
    r = cli("repair", tmp_path / "s.zarr")
    assert r.returncode == 1 and "train/zarr.json" in error_line(r.stderr)


def test_flipped_root_provenance_is_caught(store):
    flip_in_text(t(store, "zarr.json"), '"synthetic"', 2)
    with pytest.raises(stores.CorruptStoreError, match="zarr.json.*checksum"):
        stores.open(store)
    r = cli("info", store)
    assert r.returncode == 1 and error_line(r.stderr)


@pytest.mark.parametrize("damage", ["shape 300 -> 200", "truncated"])
def test_features_metadata_damage_is_caught_and_rewritten(tmp_path, reference, damage):
    path = tmp_path / "s.zarr"
    write_store(path, finalize=False)  # no consolidated copy: the array's own zarr.json is what readers see
    doc = t(path, "train/features/zarr.json")
    flip_in_text(doc, "300", 0) if damage.startswith("shape") else truncate(doc, 50)
    with pytest.raises(stores.CorruptStoreError, match="array 'features': metadata"):
        stores.open(path)["train"]
    assert any("rewrote the metadata of array 'features'" in a for a in stores.repair.repair(path))
    write_store(path)
    assert_same_store(path, reference)


@pytest.mark.parametrize("doc", ["zarr.json", "train/zarr.json", "train/labels/zarr.json"])
def test_truncated_metadata_is_one_named_line(store, doc):
    truncate(t(store, doc), 40)
    r = cli("verify", store)
    assert r.returncode != 0 and "zarr.json" in error_line(r.stderr), r.stderr
    r = cli("info", store)  # info reads the consolidated copy: it may still show the (sound) store
    assert r.returncode == 0 or error_line(r.stderr), r.stderr


def test_truncated_root_document_cannot_be_repaired(store):
    truncate(t(store, "zarr.json"), 40)
    with pytest.raises(stores.CorruptStoreError, match=r"store .*s.zarr': metadata \(zarr.json\) is unreadable"):
        stores.open(store)
    r = cli("repair", store)
    assert r.returncode == 1 and "zarr.json" in error_line(r.stderr)


def test_old_format_split_is_refused_with_a_reason(store):
    path = t(store, "zarr.json")
    text = open(path).read().replace("privlin-feature-store/2", "privlin-feature-store/1")
    open(path, "w").write(text)
    with pytest.raises(stores.StoreError, match="feature-store/1.*new --out"):
        stores.open(store)["train"]


def test_damage_through_fsspec_is_named_too():
    url = f"memory://privlin-faults-{uuid.uuid4().hex}/s.zarr"
    write_store(url)
    st = stores.open(url)
    store = location.make_store(url, read_only=False)
    location.delete_keys(store, ["train/features/c/1/0"])
    with pytest.raises(stores.CorruptStoreError, match="split 'train', shard 1, features .*missing"):
        st["train"].to_numpy()
    X, _, _ = rows()
    raw = bytearray(location.get_bytes(store, "train/labels/c/3"))
    raw[10] ^= 4
    location.put_bytes(store, "train/labels/c/3", bytes(raw))
    problems = {(e.shard, e.array) for e in stores.open(url).damage()}
    assert problems == {(1, "features"), (3, "labels")}


def test_every_chunk_is_written_so_absence_always_means_damage(tmp_path):
    w = stores.create_split(tmp_path / "z.zarr", "train", n_rows=64, dim=4, dtype="float16", shard_rows=32,
                            chunk_rows=8)
    for i in w.pending():  # all-fill data: zeros, label 0, all rows invalid
        w.write_shard(i, np.zeros((32, 4)), np.zeros(32, int), [""] * 32, np.zeros(32, bool))
    w.finalize()
    for rel in ("features/c/0/0", "labels/c/1", "valid/c/0", "ids/c/1"):
        assert os.path.getsize(t(tmp_path, "z.zarr/train", rel)) > 0
    index = np.frombuffer(open(t(tmp_path, "z.zarr/train/features/c/0/0"), "rb").read()[-68:-4], "<u8")
    assert (index != 2**64 - 1).all()  # every inner chunk too
    assert len(stores.open(tmp_path / "z.zarr")["train"]) == 0


def test_data_is_fsynced_before_the_manifest_and_the_manifest_before_the_done_mark(tmp_path, monkeypatch):
    events = []
    real_fsync, real_put = os.fsync, zarr.storage._local._put

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def put(path, value, exclusive=False):
        events.append(("write", str(path)))
        return real_put(path, value, exclusive=exclusive)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(zarr.storage._local, "_put", put)
    write_store(tmp_path / "s.zarr", shards=[2], finalize=False)
    shard = str(tmp_path / "s.zarr" / "train")

    def at(kind, rel):
        return next(i for i, (k, p) in enumerate(events) if k == kind and p == os.path.join(shard, rel))

    for rel in ("features/c/2/0", "labels/c/2", "ids/c/2", "valid/c/2"):
        assert at("write", rel) < at("fsync", rel) < at("write", "manifests/2")
    assert at("write", "manifests/2") < at("fsync", "manifests/2") < at("write", "done/c/2") < at("fsync", "done/c/2")
    assert at("fsync", "features/c/2") < at("write", "done/c/2")  # the new folder's entry is durable too


def test_deleted_split_document_is_restored_with_its_rows_and_their_spend(store):
    """Repair restores a deleted ``train/zarr.json`` from the sealed copy in the consolidated metadata: no row is
    dropped, the split's items keep their spend, and verify is clean (never "sound" after removing data)."""
    from dp_accounting import dp_event as ev

    from privlin.ledger import PrivacyLedger

    led = PrivacyLedger.for_split(store, "train")
    for i in range(2):
        led.charge(ev.GaussianDpEvent(20.0), mechanism=f"fit{i}", epsilon=0.1, delta=1e-9)
    os.unlink(t(store, "train/zarr.json"))
    actions = "\n".join(stores.repair.repair(store))
    assert "restored train/zarr.json" in actions and "every split sound" in actions, actions
    st = stores.open(store)
    assert st.splits == ["train"]
    X, y = st["train"].to_numpy()
    X0, y0, _ = rows()
    assert np.array_equal(X, X0) and np.array_equal(y, y0)
    st.verify()
    assert [e.mechanism for e in PrivacyLedger.for_split(store, "train").entries] == ["fit0", "fit1"]


def test_deleted_split_document_without_a_copy_is_an_error_not_a_smaller_store(tmp_path):
    write_store(tmp_path / "s.zarr")
    doc = json.loads(open(t(tmp_path, "s.zarr/zarr.json")).read())
    doc["consolidated_metadata"]["metadata"]["train"]["attributes"]["n_rows"] = 200  # the copy fails its seal too
    open(t(tmp_path, "s.zarr/zarr.json"), "w").write(json.dumps(doc))
    os.unlink(t(tmp_path, "s.zarr/train/zarr.json"))
    r = cli("repair", tmp_path / "s.zarr")
    line = error_line(r.stderr)
    assert r.returncode == 1 and "train/zarr.json" in line and "missing" in line
    assert "consolidated_metadata" in open(t(tmp_path, "s.zarr/zarr.json")).read()  # nothing dropped
