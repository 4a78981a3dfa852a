"""Untrusted files never run code: crafted pickles, checkpoints and ledgers are refused, nothing executes.

Each crafted file, if it were unpickled naively, would create a marker file. The
tests check both the clear error and that the marker does not exist.
"""
import io
import json
import os
import pickle
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")


class _RunsCode:
    """Unpickling this calls ``func(*args)``: how a malicious pickle runs code."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _payloads(marker):
    cmd = f"touch {marker}"
    return {
        "os.system": _RunsCode(os.system, cmd),
        "builtins.exec": _RunsCode(exec, f"open({str(marker)!r}, 'w').close()"),
        "builtins.eval": _RunsCode(eval, f"open({str(marker)!r}, 'w')"),
        "subprocess": _RunsCode(__import__("subprocess").call, ["touch", str(marker)]),
    }


@pytest.fixture
def marker(tmp_path):
    m = tmp_path / "PWNED"
    yield m
    assert not m.exists(), "a crafted file ran code"


@pytest.mark.parametrize("kind", ["os.system", "builtins.exec", "builtins.eval", "subprocess"])
@pytest.mark.parametrize("protocol", [2, 4])
def test_restricted_unpickler_refuses_code(marker, kind, protocol):
    from featurize.restricted_pickle import UnsafePickleError, restricted_load

    blob = pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "x": _payloads(marker)[kind]}, protocol=protocol)
    with pytest.raises(UnsafePickleError, match="refusing to load global"):
        restricted_load(blob)


def test_restricted_unpickler_still_reads_data():
    from featurize.restricted_pickle import restricted_load

    obj = {"data": np.arange(12, dtype=np.uint8).reshape(2, 6), "labels": [1, 2], "name": "b", "f": 1.5}
    for protocol in (2, 5):
        out = restricted_load(pickle.dumps(obj, protocol=protocol))
        assert np.array_equal(out["data"], obj["data"]) and out["labels"] == [1, 2] and out["f"] == 1.5


def test_crafted_cifar_batch_is_rejected_by_the_dataset_loader(tmp_path, marker):
    from featurize import datasets

    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    good = {"data": np.zeros((2, 3072), np.uint8), "labels": [0, 1]}
    (root / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}, protocol=2))
    (root / "test_batch").write_bytes(pickle.dumps({**good, "evil": _payloads(marker)["os.system"]}, protocol=2))
    with pytest.raises(Exception, match="refusing to load global"):
        datasets.open_split("cifar10", "test", data_dir=tmp_path)


@pytest.mark.parametrize("kind", ["os.system", "builtins.exec"])
def test_crafted_torch_checkpoint_is_rejected(tmp_path, marker, kind):
    from backbones.checkpoints import read_checkpoint

    p = tmp_path / "evil.pth"
    torch.save({"model": {"w": torch.zeros(2)}, "hook": _payloads(marker)[kind]}, p)
    with pytest.raises(ValueError, match="weights-only"):
        read_checkpoint(p)


def test_crafted_npz_with_object_array_is_rejected(tmp_path, marker):
    from backbones.checkpoints import read_checkpoint

    p = tmp_path / "evil.npz"
    arr = np.empty(1, dtype=object)
    arr[0] = _payloads(marker)["os.system"]
    np.savez(p, w=arr)
    with pytest.raises(ValueError):
        read_checkpoint(p)


def test_crafted_privacy_ledger_is_data(tmp_path, marker):
    """A ledger naming a module and class to import is refused, nothing imported or run."""
    from privlin.ledger import PrivacyLedger

    p = tmp_path / "privacy_ledger.json"
    p.write_text(json.dumps({
        "format": "privlin.ledger/2", "neighbouring": "replace_special",
        "entries": [{"id": "x", "mechanism": "m", "epsilon": 1, "delta": 1e-5, "neighbouring": "replace_special",
                     "event": {"type": "system", "module_name": "os", "class_name": "system",
                               "command": f"touch {marker}"}}],
    }))
    with pytest.raises(ValueError, match="unknown DpEvent type"):
        PrivacyLedger(p).spent(1e-5)


@pytest.mark.parametrize("kind", ["os.system", "builtins.exec", "builtins.eval", "subprocess"])
def test_the_payloads_are_real(tmp_path, kind):
    """Control: plain pickle.loads of the same payload does run code (so the tests above mean something)."""
    m = tmp_path / "ran"
    pickle.loads(pickle.dumps(_payloads(m)[kind], protocol=2))
    assert m.exists()
