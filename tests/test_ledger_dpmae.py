"""DP-MAE charges the ledger home before its first step, by the items it reads: any spelling of the folder names the
same items, a store of the same images composes with it, and a resumed run charges the steps its journal counts."""
import os

import numpy as np
import pytest

import stores
from backbones.mae.checkpoint import STEP_JOURNAL, load_checkpoint, write_step_journal
from backbones.mae.train import train
from privlin.ledger import PrivacyBudgetExceeded, PrivacyLedger
from stores import items as item_ids
from test_mae import _one_thread  # noqa: F401  (autouse: one torch thread, as in test_mae)
from test_mae_cli import _dp
from test_ledger_home import _pld
from test_mae_stop import _folder

pytestmark = pytest.mark.filterwarnings("ignore:--.*-seed makes the DP:UserWarning")


def _store_of(url, files):
    """A store of the same image files (their items as featurize names them: the hash of each file's bytes)."""
    items = np.array([item_ids.of_bytes(open(f, "rb").read()) for f in files])
    n = len(files)
    w = stores.create_split(url, "train", n_rows=n, dim=4, dtype="float32",
                            root_attrs={"dataset": "imagefolder:elsewhere", "classes": ["a", "b"]})
    w.write_shard(0, np.random.default_rng(0).standard_normal((n, 4)), np.arange(n) % 2,
                  np.array([os.path.basename(f) for f in files]), items=items)
    assert w.finalize()
    return str(url)


def test_dpmae_over_any_spelling_of_a_folder_charges_the_same_items(tmp_path, monkeypatch):
    root, files = _folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    spellings = [f"imagefolder:{root}/", f"imagefolder:{root}", "imagefolder:./imgs"]
    results = [train(_dp(tmp_path, f"run{i}", data=d, steps=2), progress=False) for i, d in enumerate(spellings)]
    keys = {r["ledger"]["items_set"] for r in results}
    assert len(keys) == 1
    url = _store_of(tmp_path / "s.zarr", files)
    led = PrivacyLedger.for_split(url, "train")
    assert led.scope.key in keys  # the store of the same files names the same items
    dpmae = [e for e in led.entries if e.mechanism == "backbone DP training (DP-MAE)"]
    assert len(dpmae) == 3 and all(e.params["steps"] == 2 for e in dpmae)
    delta = results[0]["delta"]
    assert led.spent(delta)[0] == pytest.approx(_pld([e.event for e in dpmae], delta), rel=1e-6)
    assert led.spent(delta)[0] > _pld([dpmae[0].event], delta) * 1.5  # three runs compose: more than one run's ε


def test_a_cap_on_the_items_refuses_dpmae_before_its_first_step(tmp_path):
    root, files = _folder(tmp_path)
    PrivacyLedger.for_items([item_ids.of_bytes(open(f, "rb").read()) for f in files]).set_cap(0.01, 1e-5)
    with pytest.raises(PrivacyBudgetExceeded):
        train(_dp(tmp_path, data=f"imagefolder:{root}", steps=2), progress=False)
    assert not os.path.exists(os.path.join(tmp_path, "run", "checkpoint.pth"))


def test_a_resumed_run_charges_the_steps_its_journal_counts(tmp_path):
    root, files = _folder(tmp_path)
    s = _dp(tmp_path, data=f"imagefolder:{root}", steps=4, ckpt_every=1)
    train(s, progress=False, stop_after=2)
    led = PrivacyLedger.for_items([item_ids.of_bytes(open(f, "rb").read()) for f in files])
    assert [e.params["steps"] for e in led.entries] == [4]  # the whole run, charged before its first step
    write_step_journal(os.path.join(s.out, STEP_JOURNAL), 3, False)  # a kill after step 3 began, ckpt at step 2
    with pytest.warns(UserWarning, match="lost at a stop"):
        done = train(s, resume=True, progress=False)
    assert done["dp_steps"] == 5
    assert sum(e.params["steps"] for e in led.entries) == 5  # 4 charged first, 1 more for the step redone
    assert len({e.params["run"] for e in led.entries}) == 1
    saved = load_checkpoint(os.path.join(s.out, "checkpoint.pth"))["config"]["ledger_run"]
    assert saved == led.entries[0].params["run"]  # the run's id, kept in its checkpoints
