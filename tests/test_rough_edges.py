"""The first experience's rough edges in featurize, backbones and stores: a typo answered before the heavy imports, a line at
once, ``stores info`` readable in 120 columns (JSON on request), a checkpoint mismatch in one short line."""
import json
import os
import subprocess
import sys

import pytest
import torch

import backbones
from stores import __main__ as stores_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("torch", "timm", "zarr", "jax", "torchvision")


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("argv, says", [(["--backbone", "pixels", "--dataset", "digitz"], "unknown dataset 'digitz'"),
                                        (["--backbone", "vit_bse_patch16_224", "--dataset", "digits"],
                                         "unknown backbone 'vit_bse_patch16_224'")])
def test_a_typo_is_answered_before_the_heavy_imports(argv, says):
    code = (f"import sys, time\nfrom featurize.__main__ import main\nt = time.perf_counter()\nrc = main({argv!r})\n"
            f"print(rc, round(time.perf_counter() - t, 3), sorted(m for m in {HEAVY!r} if m in sys.modules))")
    r = _fresh(code)
    rc, seconds, heavy = r.stdout.split(" ", 2)
    assert rc == "2" and heavy.strip() == "[]", (r.stdout, r.stderr)
    assert float(seconds) < 1.0 and says in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_featurize_says_what_it_does_before_the_heavy_imports():
    code = ("import io, sys, types\nimport featurize.__main__ as m\nseen = []\n"
            "class Err(io.StringIO):\n"
            f"    def write(self, t):\n        seen.append((t, sorted(x for x in {HEAVY!r} if x in sys.modules)))\n"
            "        return len(t)\n"
            "job = types.ModuleType('featurize.job')\njob.Feed = types.SimpleNamespace(parse=lambda text: None)\n"
            "job.extract = lambda *a, **k: {'out': 'x.zarr', 'splits': []}\nsys.modules['featurize.job'] = job\n"
            "sys.stderr = Err()\n"
            "rc = m.main(['--backbone', 'vip_toy', '--dataset', 'digits', '--out', 'x.zarr'])\n"
            "print(rc, seen[0])")
    r = _fresh(code)
    assert r.stdout.strip() == "0 ('featurize: loading torch, torchvision and timm ...', [])", (r.stdout, r.stderr)


def test_the_timm_names_read_without_timm_are_timms():
    import timm

    from backbones.registry import _timm_architectures

    assert _timm_architectures() == set(timm.list_models())
    backbones.check_name("vit_base_patch16_224.augreg_in21k")
    backbones.check_name("hf-hub:org/name")
    with pytest.raises(KeyError, match="unknown backbone 'vit_bse_patch16_224'"):
        backbones.check_name("vit_bse_patch16_224")


def test_the_dataset_names_checked_early_are_those_open_split_reads():
    from featurize import datasets
    from featurize.names import CIFAR

    assert set(CIFAR) == set(datasets._CIFAR)
    with pytest.raises(datasets.DatasetError, match="unknown dataset 'digitz'"):
        datasets.open_split("digitz", "train")


@pytest.fixture
def timm_like_store(make_store, blobs):
    """A store whose attributes are as long as a timm backbone's (a nested config, a long list)."""
    cfg = {"name": "vit_base_patch16_224.augreg_in21k", "arch": "timm",
           "arch_kwargs": {"model_name": "vit_base_patch16_224",
                           "pretrained_cfg": {"hf_hub_id": "timm/vit_base_patch16_224.augreg_in21k",
                                              "mean": [0.5] * 3, "std": [0.5] * 3, "input_size": [3, 224, 224],
                                              "tag": "augreg_in21k", "description": "x" * 400}}}
    x, y = blobs(64)
    st = make_store({"train": (x, y)}, attrs={"backbone_config": cfg, "classes": [f"class-{i}" for i in range(300)]})
    return str(st.url)


def test_stores_info_fits_120_columns_and_json_holds_everything(timm_like_store, capsys):
    assert stores_main.main(["info", str(timm_like_store)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120, max(lines, key=len)
    assert any(line.strip().startswith("pretrained_cfg:") for line in lines)
    assert any("(300 items)" in line for line in lines)
    assert stores_main.main(["info", str(timm_like_store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    attrs = doc["splits"]["train"]["attrs"]
    assert attrs["classes"] == [f"class-{i}" for i in range(300)]
    assert attrs["backbone_config"]["arch_kwargs"]["pretrained_cfg"]["description"] == "x" * 400
    assert doc["splits"]["train"]["shards_done"] == doc["splits"]["train"]["shards"]


def test_a_checkpoint_mismatch_is_one_short_line():
    from backbones.checkpoints import load_strict

    net = backbones.build_architecture(backbones.get_config("vip_toy"))
    state = {f"junk.{i}.weight": torch.zeros(1) for i in range(500)}
    with pytest.raises(backbones.CheckpointMismatchError) as err:
        load_strict(net, state, source="'x.pth'")
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 600 and "(500 in all)" in msg, msg
