"""timm names and ``hf-hub:`` backbones from a Hugging Face cache the test builds, offline.

The reference is timm itself: ``timm.create_model(name, pretrained=True)`` reading the same cache, with timm's own
eval transform (``resolve_data_config`` + ``create_transform``) on the same PIL images.
"""
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import backbones
from backbones.heads import BLOCK_TOKENS
from hubcache import config_bytes, offline_hub, put, safetensors_bytes  # noqa: F401 - offline_hub is a fixture

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAGGED = "test_vit.r160_in1k"  # a tiny ViT timm registers with pretrained weights on the hub (timm/test_vit...)
MICRO_ARGS = {"img_size": 32, "patch_size": 8, "embed_dim": 48, "depth": 2, "num_heads": 2}
MICRO_CFG = {"input_size": [3, 32, 32], "crop_pct": 0.8, "interpolation": "bilinear", "mean": [0.5, 0.4, 0.3],
             "std": [0.2, 0.25, 0.3], "classifier": "head", "num_classes": 7}


def images(n=5, seed=0):
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (40 + 3 * i, 50 - 2 * i, 3), dtype=np.uint8)) for i in range(n)]


def timm_reference(name, imgs, head):
    """timm's own model, weights and preprocessing; the head pooled here from timm's own outputs."""
    import timm
    from timm.data import create_transform, resolve_data_config

    model = timm.create_model(name, pretrained=True, num_classes=0).eval()
    tf = create_transform(**resolve_data_config(model=model))
    x = torch.stack([tf(im) for im in imgs])
    blocks = []
    hooks = [b.register_forward_hook(lambda m, i, o: blocks.append(o)) for b in model.blocks]
    with torch.no_grad():
        tokens = model.forward_features(x)
    for h in hooks:
        h.remove()
    if head == "cls":
        return tokens[:, 0]
    if head == "gap":
        return tokens[:, model.num_prefix_tokens:].mean(1)
    return torch.cat([F.adaptive_avg_pool1d(b.transpose(1, 2), BLOCK_TOKENS).transpose(1, 2).flatten(1)
                      for b in blocks], dim=1)


def ours(bb, imgs):
    with torch.no_grad():
        return bb.model(torch.stack([bb.transform(im) for im in imgs]))


@pytest.fixture
def tagged(offline_hub):
    """``timm/test_vit.r160_in1k`` in the cache: seeded random weights with timm's classifier, as the hub holds."""
    import timm

    torch.manual_seed(0)
    state = timm.create_model("test_vit", pretrained=False).state_dict()
    data = safetensors_bytes(state)
    commit = put(offline_hub, f"timm/{TAGGED}", {"model.safetensors": data}, commit="a" * 40)
    return offline_hub, data, commit


@pytest.fixture
def micro(offline_hub):
    """``hf-hub:privlin-test/vit-micro``: a config.json (architecture, model_args, pretrained_cfg) + safetensors."""
    import timm

    torch.manual_seed(1)
    state = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=7, **MICRO_ARGS).state_dict()
    files = {"config.json": config_bytes("vit_tiny_patch16_224", MICRO_ARGS, MICRO_CFG, 7),
             "model.safetensors": safetensors_bytes(state)}
    commit = put(offline_hub, "privlin-test/vit-micro", files, commit="b" * 40)
    return offline_hub, files, commit


@pytest.mark.parametrize("head", ["cls", "gap", "blocks"])
def test_timm_name_matches_timm_forward(tagged, head):
    cache, data, commit = tagged
    bb = backbones.load_backbone(TAGGED, head=head)
    imgs = images()
    got, ref = ours(bb, imgs), timm_reference(TAGGED, imgs, head)
    assert got.shape == ref.shape == (len(imgs), bb.dim)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    prov = bb.provenance()
    assert prov["weights_origin"] == {"repo": f"timm/{TAGGED}", "revision": commit, "requested_revision": "main",
                                      "file": "model.safetensors"}
    assert prov["weights_sha256"] == hashlib.sha256(data).hexdigest()
    assert prov["preprocessing"] == {"resize": 168, "crop": 160, "interpolation": "bicubic",  # floor(160 / 0.95)
                                     "mean": [0.5] * 3, "std": [0.5] * 3}


def test_hf_hub_name_matches_timm_forward(micro):
    cache, files, commit = micro
    bb = backbones.load_backbone("hf-hub:privlin-test/vit-micro", head="cls")
    imgs = images(seed=3)
    np.testing.assert_allclose(ours(bb, imgs).numpy(), timm_reference("hf-hub:privlin-test/vit-micro", imgs, "cls"),
                               rtol=1e-4, atol=1e-4)
    assert bb.config.preprocessing.as_dict() == {"resize": 40, "crop": 32, "interpolation": "bilinear",
                                                 "mean": MICRO_CFG["mean"], "std": MICRO_CFG["std"]}
    assert bb.provenance()["weights_origin"]["revision"] == commit
    assert bb.provenance()["weights_sha256"] == hashlib.sha256(files["model.safetensors"]).hexdigest()
    # a revision pinned in the name is the snapshot read
    assert backbones.load_backbone(f"hf-hub:privlin-test/vit-micro@{commit}").weights_origin["revision"] == commit


def test_missing_model_offline_names_the_cache_and_the_fetch(offline_hub):
    for name, repo in ((TAGGED, f"timm/{TAGGED}"), ("hf-hub:nobody/nothing", "nobody/nothing")):
        with pytest.raises(backbones.WeightsNotFoundError) as err:
            backbones.load_backbone(name)
        msg = str(err.value)
        assert str(offline_hub) in msg and "HF_HUB_OFFLINE=1" in msg and f"hf download {repo}" in msg, msg
        assert "\n" not in msg


def test_pickled_weights_are_not_read_from_the_hub(offline_hub):
    """A repo whose cache holds only pytorch_model.bin: refused (a pickle can run code), the way out named."""
    import io

    import timm

    state = timm.create_model("test_vit", pretrained=False).state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    put(offline_hub, f"timm/{TAGGED}", {"pytorch_model.bin": buf.getvalue()})
    with pytest.raises(backbones.WeightsNotFoundError, match="pytorch_model.bin, a pickle"):
        backbones.load_backbone(TAGGED)


def test_local_weights_file_for_a_timm_name_and_a_mismatch(tagged, tmp_path):
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(5)
    state = timm.create_model("test_vit", pretrained=False, num_classes=0).state_dict()  # no classifier in the file
    save_file(state, tmp_path / "mine.safetensors")
    bb = backbones.load_backbone(TAGGED, weights=tmp_path / "mine.safetensors")
    assert bb.weights_origin is None and "weights_origin" not in bb.provenance()
    vit = bb.model[1].vit
    assert all(torch.equal(vit.state_dict()[k], v) for k, v in state.items())
    del state["blocks.0.attn.qkv.weight"]
    save_file(state, tmp_path / "broken.safetensors")
    with pytest.raises(backbones.CheckpointMismatchError, match="blocks.0.attn.qkv.weight"):
        backbones.load_backbone(TAGGED, weights=tmp_path / "broken.safetensors")


def test_a_model_that_is_not_vit_shaped_is_refused_before_its_weights(offline_hub):
    with pytest.raises(ValueError, match="not ViT-shaped"):
        backbones.load_backbone("resnet18.a1_in1k")  # nothing cached: refused before looking for the weights


def test_featurize_a_hub_backbone_records_its_origin(micro, tmp_path):
    import stores
    from featurize import open_split
    from featurize.__main__ import main

    cache, files, commit = micro
    out = tmp_path / "micro.zarr"
    assert main(["--backbone", "hf-hub:privlin-test/vit-micro", "--head", "gap", "--dataset", "digits", "--split",
                 "test", "--out", str(out), "--num-workers", "0", "--no-progress", "--dtype", "float32"]) == 0
    st = stores.open(str(out))
    assert st.attrs["weights_origin"]["repo"] == "privlin-test/vit-micro"
    assert st.attrs["weights_origin"]["revision"] == commit
    assert st.attrs["backbone_config"]["arch_kwargs"]["model_name"] == "vit_tiny_patch16_224"
    feats = np.concatenate([x for x, _ in st["test"].blocks(rows=360)])
    split = open_split("digits", "test")
    bb = backbones.load_backbone("hf-hub:privlin-test/vit-micro", head="gap")
    assert feats.shape == (360, 48)
    np.testing.assert_allclose(feats[:6], ours(bb, [split.read(i) for i in range(6)]).numpy(), rtol=1e-5, atol=1e-5)


def test_offline_error_from_the_command_line(tmp_path):
    """The real environment variables, in a fresh process: one line, exit 2."""
    env = {**os.environ, "HF_HOME": str(tmp_path / "home"), "HF_HUB_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1", "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, "-m", "featurize", "--backbone", "hf-hub:nobody/nothing", "--dataset",
                        "digits", "--no-progress"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and str(tmp_path / "cache") in r.stderr, r.stderr


def test_help_does_not_import_torch():
    code = ("import sys\nfrom featurize.__main__ import main\ntry:\n    main(['--help'])\nexcept SystemExit as e:\n"
            "    assert e.code == 0\nprint(sorted(m for m in ('torch', 'timm', 'zarr', 'jax') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "hf-hub:ORG/NAME" in r.stdout and "torch" not in r.stdout.splitlines()[-1], r.stdout


def test_unknown_tag_lists_the_known_ones(offline_hub):
    with pytest.raises(KeyError, match=r"test_vit.r160_in1k"):
        backbones.load_backbone("test_vit.nosuchtag")


@pytest.mark.parametrize("arch, args, heads", [
    ("eva02_tiny_patch14_224", {"img_size": 32, "patch_size": 8, "depth": 2}, ("cls", "gap", "blocks")),
    ("test_vit2", {"img_size": 32, "patch_size": 8, "depth": 2}, ("gap", "blocks"))])
def test_other_vit_shaped_models(offline_hub, arch, args, heads):
    """EVA-02 (rotary position embedding, its own block class) and a ViT with a register token and no class token,
    made small through the hub config's model_args."""
    import timm

    torch.manual_seed(2)
    state = timm.create_model(arch, pretrained=False, num_classes=0, **args).state_dict()
    put(offline_hub, f"privlin-test/{arch}", {"config.json": config_bytes(arch, args, MICRO_CFG, 0),
                                               "model.safetensors": safetensors_bytes(state)})
    name = f"hf-hub:privlin-test/{arch}"
    imgs = images(n=2, seed=4)
    for head in heads:
        bb = backbones.load_backbone(name, head=head)
        np.testing.assert_allclose(ours(bb, imgs).numpy(), timm_reference(name, imgs, head).numpy(), rtol=1e-4,
                                   atol=1e-4, err_msg=head)
    if "cls" not in heads:
        with pytest.raises(ValueError, match="class token"):
            backbones.load_backbone(name, head="cls")


def test_a_config_json_that_redirects_the_weights_is_refused(offline_hub, tmp_path):
    """``pretrained_cfg_overlay = {file: <local .pth>}`` made timm load that file while the store
    recorded the repository's safetensors hash; refused, so what is recorded is what is loaded."""
    import timm

    torch.manual_seed(1)
    state = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=7, **MICRO_ARGS).state_dict()
    torch.save({k: torch.zeros_like(v) for k, v in state.items()}, tmp_path / "other.pth")
    args = {**MICRO_ARGS, "pretrained_cfg_overlay": {"file": str(tmp_path / "other.pth")}}
    put(offline_hub, "privlin-test/overlay", {"config.json": config_bytes("vit_tiny_patch16_224", args, MICRO_CFG, 7),
                                              "model.safetensors": safetensors_bytes(state)})
    with pytest.raises(ValueError, match="model_args set pretrained_cfg_overlay") as err:
        backbones.load_backbone("hf-hub:privlin-test/overlay")
    assert "\n" not in str(err.value)


def test_a_timm_store_can_be_resumed_and_rerun_and_records_a_local_weights_file(tagged, tmp_path):
    """timm's pretrained_cfg holds tuples, which never equalled their JSON round trip in the store, so
    the same command again was refused; with --weights the store named the hub's file instead of the one loaded."""
    import timm
    from safetensors.torch import save_file

    import stores
    from featurize.__main__ import main

    out = tmp_path / "t.zarr"
    args = ["--backbone", TAGGED, "--head", "cls", "--dataset", "digits", "--split", "test", "--out", str(out),
            "--num-workers", "0", "--no-progress", "--shard-rows", "120", "--batch-size", "60"]
    assert main(args) == 0
    assert main(args) == 0  # a finished run, again: nothing to do, not "holds another extraction"
    torch.manual_seed(5)
    save_file(timm.create_model("test_vit", pretrained=False, num_classes=0).state_dict(), tmp_path / "w.safetensors")
    out2 = tmp_path / "w.zarr"
    assert main(args[:-8] + [str(out2), "--num-workers", "0", "--no-progress", "--weights",
                             str(tmp_path / "w.safetensors")]) == 0
    config = stores.open(str(out2)).attrs["backbone_config"]
    assert config["weights_file"] == "w.safetensors" and not config["weights_source"].startswith("hf-hub:")
    assert stores.open(str(out2)).attrs["weights_sha256"] == backbones.sha256_file(tmp_path / "w.safetensors")


def test_the_offline_hint_names_the_config_and_the_weights(offline_hub):
    """The hint said ``config.json config.json``; it names what a hub backbone needs."""
    with pytest.raises(backbones.WeightsNotFoundError) as err:
        backbones.load_backbone("hf-hub:nobody/nothing")
    assert "`hf download nobody/nothing config.json model.safetensors`" in str(err.value)
    with pytest.raises(backbones.WeightsNotFoundError) as err:
        backbones.load_backbone(TAGGED)
    assert f"`hf download timm/{TAGGED} config.json model.safetensors`" in str(err.value)
