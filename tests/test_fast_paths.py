"""A wrong path typed to ``featurize`` (a data folder, an empty webdataset, a missing weights file, an ``--out`` no
store can be written at, a hub model the offline cache lacks) is answered like a typo (tests/test_rough_edges.py):
one line, exit 2, before torch, timm or zarr load (nothing timed: the heavy modules are absent when it answers)."""
import os
import subprocess
import sys

import pytest

from hubcache import offline_hub, put  # noqa: F401 - a fixture

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("torch", "timm", "zarr", "jax", "torchvision")
HUB = {"HF_HUB_OFFLINE": "1", "HF_HOME": "HFHOME", "HF_HUB_CACHE": "HFHOME/hub"}
TIMM_NAME = "vit_small_patch16_224.augreg_in21k"

CASES = [
    ("--backbone pixels --dataset imagefolder:MISSING", "imagefolder:MISSING: folder 'MISSING' does not exist", {}),
    ("--backbone pixels --dataset webdataset --data-dir MISSING", "webdataset: folder 'MISSING' does not exist", {}),
    ("--backbone pixels --dataset webdataset --data-dir EMPTY", "webdataset: no .tar shards under 'EMPTY'", {}),
    ("--backbone pixels --dataset cifar10", "dataset 'cifar10' needs --data-dir", {}),
    ("--backbone vip_base --dataset digits", "no weights for backbone 'vip_base': put 'ckpt-vip-laion233m-base.pth'",
     {}),
    ("--backbone vip_toy --dataset digits --weights MISSING", "weights file 'MISSING' for backbone 'vip_toy' does not",
     {}),
    ("--backbone pixels --dataset digits --weights EMPTY", "backbone 'pixels' takes no weights", {}),
    ("--backbone pixels --dataset digits --out AFILE", "'AFILE' is a file, not a feature store (a folder)", {}),
    ("--backbone pixels --dataset digits --out AFILE/x.zarr",
     "--out 'AFILE/x.zarr': 'AFILE' is a file, so no store can be made under it", {}),
    ("--backbone pixels --dataset digits --out FULL", "'FULL' is a folder holding other files (['a.txt']...), not a "
                                                      "feature store: choose another --out", {}),
    (f"--backbone {TIMM_NAME} --dataset digits", f"model.safetensors of timm/{TIMM_NAME} is not in the Hugging Face "
     f"cache HFHOME/hub and HF_HUB_OFFLINE=1 forbids downloading; fetch it where the hub is reachable with `hf "
     f"download timm/{TIMM_NAME} config.json model.safetensors`", HUB),
    (f"--backbone hf-hub:timm/{TIMM_NAME} --dataset digits", f"config.json of timm/{TIMM_NAME} is not in the Hugging "
     "Face cache HFHOME/hub and HF_HUB_OFFLINE=1 forbids downloading", HUB),
]


@pytest.mark.parametrize("args, says, env", CASES, ids=[c[0] for c in CASES])
def test_a_wrong_name_or_path_is_answered_before_the_heavy_imports(args, says, env, tmp_path):
    paths = {"MISSING": str(tmp_path / "missing"), "EMPTY": str(tmp_path / "empty"), "AFILE": str(tmp_path / "afile"),
             "FULL": str(tmp_path / "full"), "HFHOME": str(tmp_path / "hf")}
    os.mkdir(paths["EMPTY"])
    os.mkdir(paths["FULL"])
    open(os.path.join(paths["FULL"], "a.txt"), "w").close()
    open(paths["AFILE"], "w").close()

    def fill(text):
        for k, v in paths.items():
            text = text.replace(k, v)
        return text

    argv = [fill(w) for w in args.split()]
    code = (f"import sys\nfrom featurize.__main__ import main\nrc = main({argv!r})\n"
            f"print(rc, sorted(m for m in {HEAVY!r} if m in sys.modules))")
    base = {k: v for k, v in os.environ.items() if k not in ("PRIVLIN_WEIGHTS_DIR", *HUB)}
    r = subprocess.run([sys.executable, "-c", code], env={**base, **{k: fill(v) for k, v in env.items()},
                                                          "PYTHONPATH": ROOT},
                       capture_output=True, text=True, timeout=300)
    rc, heavy = r.stdout.split(" ", 1)
    assert rc == "2" and heavy.strip() == "[]", (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("featurize: error: "), r.stderr
    assert fill(says) in r.stderr, r.stderr


def test_offline_names_whose_files_are_cached_pass_the_early_check(offline_hub):
    """The early check refuses only what the load would: with the files in the cache (or --weights given), it
    answers nothing."""
    from backbones.hub import check_cached

    put(offline_hub, f"timm/{TIMM_NAME}", {"config.json": b"{}", "model.safetensors": b"x"})
    check_cached(TIMM_NAME)
    check_cached(f"hf-hub:timm/{TIMM_NAME}")
    other = "timm/vit_base_patch16_224.augreg_in21k"
    put(offline_hub, other, {"config.json": b'{"pretrained_cfg": {"hf_hub_filename": "open_clip_pytorch_model.bin"}}',
                             "open_clip_model.safetensors": b"x"})
    check_cached(f"hf-hub:{other}")
    check_cached("vit_base_patch16_224.augreg_in21k", weights="local.safetensors")
    check_cached("vit_small_patch16_224")  # the default tag is timm's to choose: left to the load
    with pytest.raises(Exception, match="model.safetensors of timm/vit_base_patch16_224.augreg_in21k"):
        check_cached("vit_base_patch16_224.augreg_in21k")


def test_the_repository_read_from_timm_source_is_timms_own():
    """The hub repository and file read from timm's source without importing it are those timm's registry gives,
    for every pretrained name of a sample of architectures (or none, where the source cannot tell)."""
    import timm
    from timm.models import get_pretrained_cfg

    from backbones.hub import _split_revision, _timm_source_cfg, safe_filename

    names = timm.list_pretrained()
    sample = names[::max(1, len(names) // 400)]
    told = 0
    for name in sample:
        found = _timm_source_cfg(name)
        if found is None:
            continue
        cfg = get_pretrained_cfg(name).to_dict()
        assert cfg.get("hf_hub_id"), name
        assert found == (*_split_revision(cfg["hf_hub_id"]), safe_filename(cfg)), name
        told += 1
    assert told > 0.8 * len(sample), (told, len(sample))
