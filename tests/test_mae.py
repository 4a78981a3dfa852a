"""DP-MAE: model layout, synthetic data, per-example gradients, clipping, noise, accounting, resume."""
import math
import os

import numpy as np
import pytest
import torch
from timm.models.vision_transformer import VisionTransformer

from backbones.mae import checkpoint as ckpt_mod
from backbones.mae.data import digits_split, normalize
from backbones.mae.dp import SecretStream, poisson_sample, reduce_and_privatize
from backbones.mae.model import (MAE_SIZES, MAEConfig, build_mae, encoder_from_mae, encoder_state_dict, patchify,
                                 random_masking)
from backbones.mae.per_example import (clip_and_sum, clip_factors, per_example_grads, per_example_norms,
                                       split_params)
from backbones.mae.synthetic import ShaderImages
from backbones.mae.train import TrainSettings, lr_at, main, train

# DP training with show_loss warns that its loss is computed on private images, and seeded runs that they are seeded
# (each asserted once, in test_mae_secrets.py / below); quiet elsewhere
pytestmark = [pytest.mark.filterwarnings("ignore:the training loss shown:UserWarning"),
              pytest.mark.filterwarnings("ignore:--.*-seed makes the DP:UserWarning")]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = MAE_SIZES["toy"]


@pytest.fixture(autouse=True)
def _one_thread():
    """Toy-sized ops are fastest single-threaded (and do not spin against other jobs)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _toy_batch(b, seed=0):
    g = torch.Generator().manual_seed(seed)
    imgs = normalize(ShaderImages(TOY.img_size, seed=seed)[np.arange(b)])
    return imgs, torch.rand(b, TOY.num_patches, generator=g)


# ------------------------------------------------------------------------------------------------ model


def test_state_dict_is_vip_layout_and_encoder_loads_into_plain_timm_strict():
    torch.manual_seed(0)
    mae = build_mae("toy")
    sd = mae.state_dict()
    assert {"mask_token", "decoder_embed.weight", "decoder_pred.bias", "cls_token", "pos_embed"} <= set(sd)
    vit = VisionTransformer(**TOY.timm_kwargs())
    assert set(encoder_state_dict(sd)) == set(vit.state_dict())
    plain = encoder_from_mae(mae)  # strict load inside
    x = normalize(ShaderImages(16, seed=3)[np.arange(3)])
    with torch.no_grad():  # unmasked encoder of the MAE == plain timm ViT (fused vs math attention)
        ref = mae.forward_features(x)
        out = plain.forward_features(x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_shipped_vip_toy_loads_as_specified():
    path = os.path.join(REPO, "backbones", "weights", "vip_toy.pth")
    state = torch.load(path, map_location="cpu", weights_only=True)
    assert set(state) == {"model"}
    assert all(v.dtype == torch.float16 for v in state["model"].values())
    vit = VisionTransformer(img_size=32, patch_size=4, embed_dim=128, depth=6, num_heads=4, mlp_ratio=4,
                            class_token=True, global_pool="token", num_classes=0)
    vit.load_state_dict({k: v.float() for k, v in state["model"].items()}, strict=True)
    assert 2.0e6 < os.path.getsize(path) < 3.0e6
    meta_path = os.path.join(REPO, "backbones", "weights", "vip_toy.json")
    import json

    meta = json.load(open(meta_path))
    assert meta["sha256"] == ckpt_mod.sha256_file(path)
    assert meta["steps"] > 0 and meta["loss_curve"]["step_mean_loss"][-1][1] < meta["loss_curve"]["step_mean_loss"][0][1]


def test_shipped_vip_toy_dp_privacy_reproduces_with_dp_accounting():
    """The released DP encoder: intact, secret sample and noise, and its (epsilon, delta) from sigma, q and steps."""
    import json

    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    from backbones.checkpoints import read_checkpoint
    from backbones.mae.train import run_dp_event

    path = os.path.join(REPO, "backbones", "weights", "vip_toy_dp.pth")
    meta = json.load(open(os.path.join(REPO, "backbones", "weights", "vip_toy_dp.json")))
    assert meta["sha256"] == ckpt_mod.sha256_file(path)
    read_checkpoint(path)  # verifies the tensor sha256 stored inside
    priv = meta["privacy"]
    assert priv["seeded"] is False and all("os.urandom" in v for v in priv["randomness"].values())
    assert "noise_seed" not in meta["settings"] and "sample_seed" not in meta["settings"]
    assert "-seed" not in meta["command"].replace("--seed 0", "")
    assert priv["neighboring_relation"] == "REPLACE_SPECIAL" and priv["n_private"] == 1437
    assert priv["delta"] <= 1 / (10 * priv["n_private"])
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
        priv["sample_rate"], dp_accounting.GaussianDpEvent(priv["noise_multiplier"])), priv["steps"])
    assert run_dp_event(meta) == event
    relation = dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    if priv["accountant"] == "rdp":
        accountant = rdp_privacy_accountant.RdpAccountant(neighboring_relation=relation)
    else:
        accountant = pld_privacy_accountant.PLDAccountant(relation)
    independent = accountant.compose(event).get_epsilon(priv["delta"])
    assert priv["epsilon"] == pytest.approx(independent, rel=1e-3)
    assert priv["epsilon"] <= meta["settings"]["epsilon"]


def test_masking_is_per_example_and_hides_the_right_count():
    x = torch.arange(2 * 16 * 3, dtype=torch.float32).reshape(2, 16, 3)
    noise = torch.rand(2, 16, generator=torch.Generator().manual_seed(0))
    vis, mask, ids_restore = random_masking(x, 4, noise)
    assert vis.shape == (2, 4, 3)
    assert mask.sum(1).tolist() == [12.0, 12.0]
    assert not torch.equal(mask[0], mask[1])  # each example its own mask
    # the visible tokens are exactly the unmasked ones, in order of increasing noise
    for b in range(2):
        keep = torch.argsort(noise[b])[:4]
        assert torch.equal(vis[b], x[b, keep])
        assert torch.equal(mask[b][keep], torch.zeros(4))


def test_patchify_and_loss_shapes():
    mae = build_mae("toy")
    imgs, noise = _toy_batch(3)
    assert patchify(imgs, 4).shape == (3, TOY.num_patches, 4 * 4 * 3)
    losses = mae(imgs, noise)
    assert losses.shape == (3,) and torch.isfinite(losses).all() and (losses > 0).all()


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="multiple of patch_size"):
        MAEConfig(img_size=30, patch_size=4)
    with pytest.raises(ValueError, match="mask_ratio"):
        MAEConfig(mask_ratio=1.0)
    with pytest.raises(KeyError, match="unknown MAE size"):
        build_mae("huge")
    with pytest.raises(ValueError, match="sample_rate"):
        TrainSettings(sample_rate=1.5)
    assert [MAE_SIZES[k].embed_dim for k in ("nano", "tiny", "small", "base", "large")] == [192, 384, 576, 768, 1024]


# --------------------------------------------------------------------------------------------- data


def test_shader_images_are_seeded_indexable_and_varied():
    s = ShaderImages(16, seed=7)
    a, b = s[[0, 1, 2]], s[[2, 1, 0]]
    assert a.shape == (3, 3, 16, 16) and a.dtype == torch.float32
    assert torch.equal(a[2], b[0])  # image i depends on (seed, i) only
    assert not torch.equal(a[0], a[1])
    assert not torch.equal(ShaderImages(16, seed=8)[[0]], a[:1])
    assert 0.0 <= float(a.min()) and float(a.max()) <= 1.0 and float(a.std()) > 0.05


def test_digits_split_matches_featurize_rows():
    x, y = digits_split("train", size=16)
    xt, yt = digits_split("test", size=16)
    assert x.shape == (1437, 3, 16, 16) and xt.shape[0] == 360
    from featurize.datasets import open_split

    fs = open_split("digits", "train")
    assert np.array_equal(np.asarray(fs.labels), y)


# ------------------------------------------------------------------------------- per-example gradients


def test_vmap_per_example_grads_equal_a_loop():
    torch.manual_seed(0)
    mae = build_mae("toy")
    imgs, noise = _toy_batch(4)
    trainable, frozen = split_params(mae)
    grads, losses = per_example_grads(mae, trainable, frozen, imgs, noise)
    for i in range(4):
        mae.zero_grad(set_to_none=True)
        loss = mae(imgs[i:i + 1], noise[i:i + 1])[0]
        loss.backward()
        torch.testing.assert_close(losses[i], loss.detach(), rtol=1e-5, atol=1e-6)
        for name, p in mae.named_parameters():
            if p.requires_grad:
                torch.testing.assert_close(grads[name][i], p.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert "pos_embed" not in grads  # fixed sin-cos, not trained


def test_every_clipped_norm_is_at_most_C_and_sum_is_of_clipped():
    torch.manual_seed(0)
    mae = build_mae("toy")
    imgs, noise = _toy_batch(6)
    trainable, frozen = split_params(mae)
    grads, _ = per_example_grads(mae, trainable, frozen, imgs, noise)
    norms = per_example_norms(grads)
    for clip in (1e-3, float(norms.median()), 10 * float(norms.max())):
        scale = clip_factors(norms, clip)
        clipped_norms = per_example_norms({k: scale.view(-1, *[1] * (g.ndim - 1)) * g for k, g in grads.items()})
        assert (clipped_norms <= clip).all()
        # below the bound nothing changes, above it the norm lands on the bound
        small = norms < clip
        torch.testing.assert_close(clipped_norms[small], norms[small], rtol=1e-5, atol=0)
        torch.testing.assert_close(clipped_norms[~small], torch.full_like(norms[~small], clip), rtol=1e-4, atol=0)
        summed, _ = clip_and_sum(grads, clip)
        for k, g in grads.items():
            torch.testing.assert_close(summed[k], (scale.view(-1, *[1] * (g.ndim - 1)) * g).sum(0),
                                       rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError):
        clip_factors(norms, 0.0)


# ------------------------------------------------------------------------------------------- noise


def test_noise_std_matches_sigma_C_and_is_fresh():
    sigma, C, n = 0.7, 0.1, 400_000
    stream = SecretStream()
    g = stream.generator(0)
    zero = {"a": torch.zeros(n // 2), "b": torch.zeros(n // 4, 2)}
    out = reduce_and_privatize(zero, noise_std=sigma * C, denominator=1.0, generator=g)
    z = torch.cat([out["a"], out["b"].flatten()])
    # sample std of n normals: relative s.e. ~ 1/sqrt(2n) = 0.11%; allow 5 s.e.
    assert abs(float(z.std()) / (sigma * C) - 1) < 5 / math.sqrt(2 * n)
    assert abs(float(z.mean())) < 5 * sigma * C / math.sqrt(n)
    again = reduce_and_privatize(zero, noise_std=sigma * C, denominator=1.0, generator=stream.generator(1))
    r = np.corrcoef(z.numpy(), torch.cat([again["a"], again["b"].flatten()]).numpy())[0, 1]
    assert abs(r) < 5 / math.sqrt(n)  # fresh draw every step
    half = reduce_and_privatize({"a": torch.zeros(n)}, noise_std=sigma * C, denominator=4.0, generator=g)["a"]
    assert abs(float(half.std()) / (sigma * C / 4) - 1) < 5 / math.sqrt(2 * n)


def test_poisson_sampling_rate():
    g = SecretStream(0).generator(0)
    sizes = [len(poisson_sample(1000, 0.1, g)) for _ in range(200)]
    # mean 100, sd sqrt(1000*0.1*0.9)=9.49 per draw; mean of 200 draws has s.e. 0.67
    assert abs(np.mean(sizes) - 100) < 4 and 6 < np.std(sizes) < 13
    s = poisson_sample(1000, 0.1, g)
    assert torch.equal(s, torch.sort(s).values) and len(torch.unique(s)) == len(s)
    with pytest.raises(ValueError):
        poisson_sample(10, 0.0, g)


def _dp_settings(tmp_path, **kw):
    base = dict(size="toy", data="digits", dp=True, steps=4, sample_rate=0.004, physical_batch=4, lr=1e-3,
                warmup_steps=1, seed=0, noise_seed=1, sample_seed=2, clip=0.1, noise_multiplier=2.0, accountant="rdp", log_every=2, ckpt_every=2,
                out=str(tmp_path / "run"))
    base.update(kw)
    return TrainSettings(**base)


def test_noise_once_per_logical_step_whatever_the_physical_batch(tmp_path):
    # accumulating one logical batch in physical batches of 1 or 16 gives the same update:
    # one noise draw per logical step (a draw per physical batch would change the result)
    a = train(_dp_settings(tmp_path / "a", steps=1, physical_batch=1), progress=False)
    b = train(_dp_settings(tmp_path / "b", steps=1, physical_batch=16), progress=False)
    sa = torch.load(a["checkpoint"], weights_only=True)["model"]
    sb = torch.load(b["checkpoint"], weights_only=True)["model"]
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=1e-5, atol=1e-7, msg=k)


def test_reported_epsilon_equals_dp_accounting(tmp_path):
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    # two PLD evaluations in all (each is slow): one in training, one here
    res = train(_dp_settings(tmp_path, steps=2, noise_multiplier=1.3, sample_rate=0.01, accountant="pld"),
                progress=False)
    sigma, q, delta = res["noise_multiplier"], res["sample_rate"], res["delta"]
    assert delta == 1e-5  # default min(1e-5, 1/(10 N)), N = 1437
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), 2)
    independent = pld_privacy_accountant.PLDAccountant().compose(event).get_epsilon(delta)
    assert sigma == 1.3 and q == 0.01
    assert res["epsilon"] == pytest.approx(independent, rel=2e-3)
    stored = torch.load(res["checkpoint"], weights_only=True)["accountant"]
    assert stored["steps"] == 2 and stored["epsilon"] == pytest.approx(res["epsilon"])


@pytest.mark.parametrize("dp", [True, False])
def test_resume_equals_uninterrupted_run(tmp_path, dp):
    kw = {} if dp else dict(data="synthetic", dp=False, batch_size=4)
    full = train(_dp_settings(tmp_path / "full", **kw), progress=False)
    s = _dp_settings(tmp_path / "cut", **kw)
    part = train(s, progress=False, stop_after=2)
    assert part["step"] == 2
    rest = train(s, resume=True, progress=False)
    assert rest["step"] == 4
    a = torch.load(full["checkpoint"], weights_only=True)
    b = torch.load(rest["checkpoint"], weights_only=True)
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert a["history"] == b["history"]
    if dp:
        assert a["accountant"] == b["accountant"] and rest["epsilon"] == full["epsilon"]
    with pytest.raises(ValueError, match="cannot resume"):
        train(_dp_settings(tmp_path / "cut", clip=0.2, **kw), resume=True, progress=False)


def test_lr_schedule_warmup_then_cosine():
    s = TrainSettings(size="toy", steps=10, warmup_steps=2, lr=1.0, min_lr=0.0)
    lrs = [lr_at(i, s) for i in range(10)]
    assert lrs[:2] == [0.5, 1.0] and lrs[2] == pytest.approx(1.0)
    assert all(x >= y for x, y in zip(lrs[1:], lrs[2:])) and lrs[-1] < 0.05


def test_cli_dp_run_init_from_encoder_and_export(tmp_path, capsys):
    # a synthetic pretraining exported as encoder-only, then a DP run initialized from it
    enc = tmp_path / "enc.pth"
    assert main(["--size", "toy", "--steps", "2", "--batch-size", "4", "--out", str(tmp_path / "syn"),
                 "--export", str(enc), "--no-progress"]) == 0
    # sigma calibrated to epsilon=8 (RDP: fast), then epsilon reported against an independent RDP computation
    assert main(["--size", "toy", "--data", "digits", "--dp", "--epsilon", "8", "--steps", "2", "--accountant", "rdp",
                 "--sample-rate", "0.01", "--init", str(enc), "--out", str(tmp_path / "dp"),
                 "--export", str(tmp_path / "dp.pth"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "epsilon=" in out and "sigma=" in out
    import json

    meta = json.load(open(tmp_path / "dp.json"))
    priv = meta["privacy"]
    assert "not released" in meta["loss_curve"]
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(priv["noise_multiplier"])), 2)
    independent = rdp_privacy_accountant.RdpAccountant().compose(event).get_epsilon(priv["delta"])
    assert priv["epsilon"] == pytest.approx(independent, rel=1e-6)
    assert 7.5 < priv["epsilon"] <= 8.0  # calibrated: meets the target, close to it (precision is privlin's)
    mae = build_mae("toy")
    missing = ckpt_mod.load_mae_weights(mae, str(enc))
    assert missing and all(k.startswith("decoder_") or k == "mask_token" for k in missing)


def test_ghost_and_vmap_runs_train_the_same_model(tmp_path):
    # same seeded sample, masks and noise; only the clipping path differs (accumulated over physical batches of 3)
    a = train(_dp_settings(tmp_path / "g", steps=2, sample_rate=0.01, physical_batch=3), progress=False)
    b = train(_dp_settings(tmp_path / "v", steps=2, sample_rate=0.01, physical_batch=3, per_example="vmap"),
              progress=False)
    sa = torch.load(a["checkpoint"], weights_only=True)["model"]
    sb = torch.load(b["checkpoint"], weights_only=True)["model"]
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=1e-4, atol=1e-6, msg=k)
