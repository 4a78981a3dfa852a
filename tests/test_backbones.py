"""Backbone registry, checkpoint formats and pooling heads, checked against timm itself on tiny ViTs."""
import dataclasses
import os
import pickle

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer, _load_weights

import backbones
from backbones import CheckpointMismatchError, WeightsNotFoundError, get_config, load_backbone
from backbones.registry import Preprocessing

TINY = dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, mlp_ratio=4.0, qkv_bias=True,
            class_token=True, global_pool="token", num_classes=0)


def tiny_config(fmt="auto", **kw):
    return dataclasses.replace(get_config("vip_toy"), name="tiny", arch_kwargs=dict(TINY, **kw), weights_format=fmt,
                               preprocessing=Preprocessing(resize=16, crop=16), bundled=False)


def reference_vit(seed=0, **kw):
    """The timm model built directly, with random (non-trivial) weights."""
    torch.manual_seed(seed)
    model = VisionTransformer(**dict(TINY, **kw)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # zero-initialized biases and LayerNorms become distinctive
    return model


@pytest.fixture
def images():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (5, 3, 16, 16), generator=g, dtype=torch.uint8)


def normalized(images, pre):
    mean = torch.tensor(pre.mean).view(1, 3, 1, 1)
    std = torch.tensor(pre.std).view(1, 3, 1, 1)
    return (images.float() / 255 - mean) / std


def vit_to_jax_npz(model, path, big_vision=False):
    """Write ``model`` in the Google ViT (or big_vision) npz layout: an inverse mapping written for the test."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    D, H = TINY["embed_dim"], TINY["num_heads"]
    pre = "params/" if big_vision else ""
    mha, mlp, ln2 = (0, 0, 1) if big_vision else (1, 3, 2)
    w = {f"{pre}embedding/kernel": sd["patch_embed.proj.weight"].transpose(2, 3, 1, 0),
         f"{pre}embedding/bias": sd["patch_embed.proj.bias"], f"{pre}cls": sd["cls_token"],
         f"{pre}pos_embedding" if big_vision else "Transformer/posembed_input/pos_embedding": sd["pos_embed"],
         f"{pre}Transformer/encoder_norm/scale": sd["norm.weight"],
         f"{pre}Transformer/encoder_norm/bias": sd["norm.bias"],
         f"{pre}head/kernel": np.zeros((D, 7), np.float32), f"{pre}head/bias": np.zeros(7, np.float32)}
    for i in range(TINY["depth"]):
        b, o = f"{pre}Transformer/encoderblock_{i}/", f"blocks.{i}."
        a = f"{b}MultiHeadDotProductAttention_{mha}/"
        q, k, v = np.split(sd[o + "attn.qkv.weight"], 3)
        qb, kb, vb = np.split(sd[o + "attn.qkv.bias"], 3)
        for name, W, B in (("query", q, qb), ("key", k, kb), ("value", v, vb)):
            w[f"{a}{name}/kernel"] = W.T.reshape(D, H, D // H)
            w[f"{a}{name}/bias"] = B.reshape(H, D // H)
        w[f"{a}out/kernel"] = sd[o + "attn.proj.weight"].T.reshape(H, D // H, D)
        w[f"{a}out/bias"] = sd[o + "attn.proj.bias"]
        w[f"{b}LayerNorm_0/scale"], w[f"{b}LayerNorm_0/bias"] = sd[o + "norm1.weight"], sd[o + "norm1.bias"]
        w[f"{b}LayerNorm_{ln2}/scale"], w[f"{b}LayerNorm_{ln2}/bias"] = sd[o + "norm2.weight"], sd[o + "norm2.bias"]
        for r in range(2):
            w[f"{b}MlpBlock_{mlp}/Dense_{r}/kernel"] = sd[o + f"mlp.fc{r + 1}.weight"].T
            w[f"{b}MlpBlock_{mlp}/Dense_{r}/bias"] = sd[o + f"mlp.fc{r + 1}.bias"]
    np.savez(path, **w)
    return w


# ----------------------------------------------------------------------------------------------- registry

def test_registry_names_and_copies():
    names = backbones.list_backbones()
    for name in ("vip_base", "vip_large", "syn_vip_base", "vit_b16_in21k", "vit_l16", "vit_h14", "pixels", "vip_toy"):
        assert name in names
    cfg = get_config("vip_base")
    cfg.arch_kwargs["depth"] = 1
    assert get_config("vip_base").arch_kwargs["depth"] == 12  # reading never changes the registry
    with pytest.raises(KeyError, match="vip_base"):
        get_config("vip_bse")


@pytest.mark.parametrize("name", ["vip_base", "vip_large", "syn_vip_base", "vit_b16_in21k", "vit_l16", "vit_h14"])
def test_registry_architectures_match_timm(name):
    cfg = get_config(name)
    with torch.device("meta"):
        ours = backbones.build_architecture(cfg).state_dict()
        ref = timm.create_model(cfg.timm_reference, pretrained=False, num_classes=0).state_dict()
    assert {k: tuple(v.shape) for k, v in ours.items()} == {k: tuple(v.shape) for k, v in ref.items()}


def test_registry_preprocessing_matches_published_settings():
    for name, tag in (("vit_b16_in21k", "vit_base_patch16_224.orig_in21k"),
                      ("vit_l16", "vit_large_patch16_224.orig_in21k"), ("vit_h14", "vit_huge_patch14_224.orig_in21k")):
        pre, ref = get_config(name).preprocessing, timm.models.get_pretrained_cfg(tag)
        assert (pre.crop, pre.interpolation) == (ref.input_size[-1], ref.interpolation)
        assert pre.resize == int(ref.input_size[-1] / ref.crop_pct)
        assert tuple(pre.mean) == tuple(ref.mean) and tuple(pre.std) == tuple(ref.std)
    # ViP-MAE main_linprobe.py: Resize(256, interpolation=3 (bicubic)), CenterCrop(224), ImageNet mean/std.
    vip = get_config("vip_base").preprocessing
    assert (vip.resize, vip.crop, vip.interpolation) == (256, 224, "bicubic")
    assert vip.mean == (0.485, 0.456, 0.406) and vip.std == (0.229, 0.224, 0.225)


def test_blocks_head_width_vit_b_is_36864():
    with torch.device("meta"):
        net = backbones.build_architecture(get_config("vip_base"))
    assert backbones.heads.PooledViT(net, "blocks").dim == 36864


# ----------------------------------------------------------------------------------------------- formats

def test_vip_pth_with_decoder_loads_and_matches_timm(tmp_path, images):
    ref = reference_vit()
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    state.update({"mask_token": torch.zeros(1, 1, 16), "decoder_embed.weight": torch.randn(16, 32),
                  "decoder_pred.bias": torch.randn(48)})
    torch.save({"model": state, "epoch": 3}, tmp_path / "vip.pth")
    bb = load_backbone(tiny_config("mae_pth"), head="cls", weights=tmp_path / "vip.pth")
    x = normalized(images, bb.config.preprocessing)
    with torch.no_grad():
        expected = ref(x)  # timm: num_classes=0, global_pool="token" -> final-norm class token
    torch.testing.assert_close(bb.model(images), expected, rtol=1e-5, atol=1e-5)
    assert bb.weights_sha256 == __import__("hashlib").sha256((tmp_path / "vip.pth").read_bytes()).hexdigest()


def test_float16_vip_pth_loads(tmp_path, images):
    ref = reference_vit()
    torch.save({"model": {k: v.half() for k, v in ref.state_dict().items()}}, tmp_path / "half.pth")
    bb = load_backbone(tiny_config("mae_pth"), weights=tmp_path / "half.pth")
    with torch.no_grad():
        expected = ref.half().float()(normalized(images, bb.config.preprocessing))
    torch.testing.assert_close(bb.model(images), expected, rtol=1e-4, atol=1e-4)


def test_timm_safetensors_loads_and_matches(tmp_path, images):
    from safetensors.torch import save_file
    ref = reference_vit(seed=3)
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(tmp_path / "model.safetensors"))
    bb = load_backbone(tiny_config("auto"), weights=tmp_path / "model.safetensors")
    with torch.no_grad():
        expected = ref(normalized(images, bb.config.preprocessing))
    torch.testing.assert_close(bb.model(images), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("big_vision", [False, True])
def test_jax_npz_loads_like_timms_own_loader(tmp_path, images, big_vision):
    ref = reference_vit(seed=5)
    vit_to_jax_npz(ref, tmp_path / "vit.npz", big_vision=big_vision)
    bb = load_backbone(tiny_config("auto"), weights=tmp_path / "vit.npz")
    timm_loaded = VisionTransformer(**TINY).eval()
    with torch.no_grad():
        _load_weights(timm_loaded, str(tmp_path / "vit.npz"))  # timm's independent npz -> torch mapping
        x = normalized(images, bb.config.preprocessing)
        by_timm, direct = timm_loaded(x), ref(x)
    torch.testing.assert_close(bb.model(images), by_timm, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bb.model(images), direct, rtol=1e-5, atol=1e-5)


def test_wrong_keys_fail_loudly(tmp_path):
    state = dict(reference_vit().state_dict())
    del state["blocks.1.mlp.fc2.bias"]
    state["blocks.7.attn.qkv.weight"] = torch.zeros(3)
    torch.save({"model": state}, tmp_path / "bad.pth")
    with pytest.raises(CheckpointMismatchError, match="blocks.1.mlp.fc2.bias") as err:
        load_backbone(tiny_config("mae_pth"), weights=tmp_path / "bad.pth")
    assert err.value.missing == ["blocks.1.mlp.fc2.bias"]
    assert err.value.unexpected == ["blocks.7.attn.qkv.weight"]
    assert "unexpected keys: blocks.7.attn.qkv.weight" in str(err.value)


def test_wrong_shapes_and_depth_fail_loudly(tmp_path):
    torch.save({"model": reference_vit(embed_dim=64).state_dict()}, tmp_path / "wide.pth")
    shapes = r"shape mismatches: blocks.0.attn.proj.bias: checkpoint \(64,\) vs model \(32,\)"
    with pytest.raises(CheckpointMismatchError, match=shapes):
        load_backbone(tiny_config("mae_pth"), weights=tmp_path / "wide.pth")
    w = vit_to_jax_npz(reference_vit(), tmp_path / "full.npz")
    np.savez(tmp_path / "short.npz", **{k: v for k, v in w.items() if "encoderblock_1/" not in k})
    with pytest.raises(CheckpointMismatchError, match="missing keys: blocks.1"):
        load_backbone(tiny_config("auto"), weights=tmp_path / "short.npz")
    np.savez(tmp_path / "extra.npz", **w, **{"Transformer/encoderblock_2/LayerNorm_0/scale": np.ones(32)})
    with pytest.raises(CheckpointMismatchError, match="unexpected keys: Transformer/encoderblock_2"):
        load_backbone(tiny_config("auto"), weights=tmp_path / "extra.npz")


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_checkpoint_with_code_is_refused(tmp_path):
    with open(tmp_path / "evil.pth", "wb") as f:
        pickle.dump({"model": {"x": _RunsCode()}}, f)
    with pytest.raises(ValueError, match="weights-only"):
        load_backbone(tiny_config("mae_pth"), weights=tmp_path / "evil.pth")


# ----------------------------------------------------------------------------------------------- weights lookup

def test_missing_weights_message_names_file_and_places(tmp_path, monkeypatch):
    monkeypatch.delenv(backbones.WEIGHTS_DIR_ENV, raising=False)
    with pytest.raises(WeightsNotFoundError) as err:
        load_backbone("vip_base")
    msg = str(err.value)
    assert "ckpt-vip-laion233m-base.pth" in msg and "PRIVLIN_WEIGHTS_DIR" in msg and "--weights" in msg
    monkeypatch.setenv(backbones.WEIGHTS_DIR_ENV, str(tmp_path))
    with pytest.raises(WeightsNotFoundError, match=str(tmp_path / "ViT-H_14.npz")):
        load_backbone("vit_h14")
    with pytest.raises(WeightsNotFoundError, match="does not exist"):
        load_backbone("vip_base", weights=tmp_path / "nope.pth")


def test_weights_dir_env_is_used(tmp_path, monkeypatch):
    torch.save({"model": reference_vit().state_dict()}, tmp_path / "tiny.pth")
    monkeypatch.setenv(backbones.WEIGHTS_DIR_ENV, str(tmp_path))
    cfg = dataclasses.replace(tiny_config("mae_pth"), weights_file="tiny.pth")
    assert load_backbone(cfg).weights_path == tmp_path / "tiny.pth"


# ----------------------------------------------------------------------------------------------- heads

def test_gap_head_matches_timm_avg_pool(tmp_path, images):
    ref = reference_vit()
    torch.save({"model": ref.state_dict()}, tmp_path / "w.pth")
    bb = load_backbone(tiny_config("mae_pth"), head="gap", weights=tmp_path / "w.pth")
    avg = VisionTransformer(**dict(TINY, global_pool="avg", fc_norm=False)).eval()
    avg.load_state_dict(ref.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(bb.model(images), avg(normalized(images, bb.config.preprocessing)),
                                   rtol=1e-5, atol=1e-5)


def test_blocks_head_pools_every_block_into_four_token_segments(tmp_path, images):
    ref = reference_vit()
    torch.save({"model": ref.state_dict()}, tmp_path / "w.pth")
    bb = load_backbone(tiny_config("mae_pth"), head="blocks", weights=tmp_path / "w.pth")
    assert bb.dim == TINY["depth"] * 4 * TINY["embed_dim"]
    got = bb.model(images).numpy()
    with torch.no_grad():  # timm's own per-block outputs, then the pooling written out by hand
        per_block = ref.forward_intermediates(normalized(images, bb.config.preprocessing), norm=False,
                                              output_fmt="NLC", intermediates_only=True, return_prefix_tokens=True)
    expected = []
    for patches, prefix in per_block:
        tokens = torch.cat([prefix, patches], dim=1).numpy()  # (B, T, D), class token first
        T = tokens.shape[1]
        segs = [tokens[:, (i * T) // 4: -((-(i + 1) * T) // 4)].mean(axis=1) for i in range(4)]
        expected.append(np.stack(segs, axis=1))  # (B, 4, D)
    expected = np.stack(expected, axis=1).reshape(len(images), -1)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_pixels_backbone_is_normalized_pixels(images):
    bb = load_backbone("pixels")
    assert bb.dim == 3072 and bb.weights_sha256 is None
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    np.testing.assert_allclose(bb.model(x).numpy(), (x.float().numpy().reshape(2, -1) / 255 - 0.5) / 0.5, atol=1e-6)
    with pytest.raises(ValueError, match="heads"):
        load_backbone("pixels", head="cls")


def test_shipped_vip_toy_loads_if_present():
    if not (backbones.checkpoints.BUNDLED_DIR / "vip_toy.pth").is_file():
        pytest.skip("backbones/weights/vip_toy.pth not committed yet")
    bb = load_backbone("vip_toy", head="blocks")
    assert bb.dim == 6 * 4 * 128
    out = bb.model(torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8))
    assert out.shape == (2, 3072) and torch.isfinite(out).all()
