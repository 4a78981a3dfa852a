"""DP-MAE's fast path (mixed ghost norms + book-keeping) against the vmap reference."""
import numpy as np
import pytest
import torch
from torch import nn

import backbones.mae.ghost as ghost
from backbones.mae.data import normalize
from backbones.mae.ghost import UnsupportedModuleError, ghost_clip_and_sum
from backbones.mae.model import MAE_SIZES, build_mae
from backbones.mae.per_example import clip_and_sum, clipped_grad_sum, per_example_grads, per_example_norms, split_params
from backbones.mae.synthetic import ShaderImages
from test_mae import _one_thread  # noqa: F401  (autouse: one torch thread, as in test_mae)


def _batch(cfg, b, seed=0):
    imgs = ShaderImages(cfg.img_size, seed=seed)[np.arange(b)]
    # images of different contrast: per-example norms spread over a wide range
    imgs = normalize(imgs) * torch.linspace(0.05, 1.5, b).view(b, 1, 1, 1)
    return imgs, torch.rand(b, cfg.num_patches, generator=torch.Generator().manual_seed(seed))


def _reference(model, imgs, noise):
    trainable, frozen = split_params(model)
    grads, losses = per_example_grads(model, trainable, frozen, imgs, noise)  # vmap(grad): the reference
    return grads, per_example_norms(grads), losses


def _rel(a, b):
    return float((a - b).norm() / b.norm())


def _assert_equals_reference(model, imgs, noise, grads, norms, losses):
    lo, hi = float(norms.min()), float(norms.max())
    mid = float(norms.median())
    for clip in (0.5 * lo, mid, 2.0 * hi):  # all clipped; some below and some above; none clipped
        below = norms < clip
        if clip == mid:
            assert below.any() and (~below).any()
        ref, _ = clip_and_sum(grads, clip)
        summed, fast_norms, fast_losses = ghost_clip_and_sum(model, imgs, noise, clip)
        assert set(summed) == set(ref)
        assert _rel(fast_norms, norms) <= 1e-5 and float(((fast_norms - norms).abs() / norms).max()) <= 1e-5
        torch.testing.assert_close(fast_losses, losses, rtol=1e-6, atol=0)
        flat = torch.cat([summed[k].flatten() for k in ref])
        flat_ref = torch.cat([ref[k].flatten() for k in ref])
        assert _rel(flat, flat_ref) <= 1e-5, clip
        for k in ref:  # every tensor, not only the total
            assert summed[k].shape == ref[k].shape and summed[k].dtype == torch.float32
            assert _rel(summed[k], ref[k]) <= 1e-5, (k, clip, _rel(summed[k], ref[k]))


@pytest.mark.parametrize("plan", ["mixed", "ghost", "instantiate"])
def test_vip_toy_clipped_sums_and_norms_equal_vmap(plan, monkeypatch):
    if plan != "mixed":  # force every linear layer through one of the two norm computations
        monkeypatch.setattr(ghost, "layer_plan", lambda t, d_in, d_out: plan)
    torch.manual_seed(0)
    model = build_mae("vip_toy")
    imgs, noise = _batch(model.cfg, 6)
    _assert_equals_reference(model, imgs, noise, *_reference(model, imgs, noise))


def test_vit_b_shaped_two_blocks_clipped_sums_and_norms_equal_vmap():
    # ViT-B/16 encoder (224 px, width 768, 12 heads, MLP 3072) and the paper's 512-wide decoder, 2 blocks each
    torch.manual_seed(0)
    model = build_mae("base", depth=2, decoder_depth=2)
    imgs, noise = _batch(model.cfg, 3, seed=1)
    _assert_equals_reference(model, imgs, noise, *_reference(model, imgs, noise))


def test_mixed_plan_uses_both_norms_on_vip_toy():
    """The mixed test above exercises both branches: ghost in the encoder (T=17), instantiation in the decoder."""
    cfg = MAE_SIZES["vip_toy"]
    t_enc, t_dec = cfg.num_visible + 1, cfg.num_patches + 1
    assert ghost.layer_plan(t_enc, 128, 384) == "ghost"
    assert ghost.layer_plan(t_dec, 64, 192) == "instantiate"
    assert ghost.layer_plan(cfg.num_patches, 48, 128) == "instantiate"  # patch embedding, all 64 patches


def test_gradients_untouched_and_dispatch_matches():
    torch.manual_seed(0)
    model = build_mae("toy")
    imgs, noise = _batch(model.cfg, 4)
    a, na, _ = clipped_grad_sum(model, imgs, noise, 0.05, method="ghost")
    b, nb, _ = clipped_grad_sum(model, imgs, noise, 0.05, method="vmap")
    assert all(p.grad is None for p in model.parameters())
    torch.testing.assert_close(na, nb, rtol=1e-5, atol=0)
    for k in b:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-8)
    with pytest.raises(ValueError, match="method"):
        clipped_grad_sum(model, imgs, noise, 0.05, method="loop")


class _Scale(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * self.gamma


def test_unknown_modules_are_refused_not_miscomputed():
    torch.manual_seed(0)
    model = build_mae("toy")
    imgs, noise = _batch(model.cfg, 2)
    model.blocks[0].ls1 = _Scale(model.cfg.embed_dim)  # like timm's LayerScale: a parameter ghost does not know
    with pytest.raises(UnsupportedModuleError, match=r"_Scale \('blocks.0.ls1', parameters \['gamma'\]\).*vmap"):
        ghost_clip_and_sum(model, imgs, noise, 0.1)
    summed, _, _ = clipped_grad_sum(model, imgs, noise, 0.1, method="vmap")  # the fallback handles it
    assert "blocks.0.ls1.gamma" in summed
    plain = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(UnsupportedModuleError, match="MaskedAutoencoder only"):
        ghost.check_supported(plain)
    from backbones.mae.model import MaskedAutoencoder

    class Other(MaskedAutoencoder):
        def forward_encoder(self, imgs, mask_noise):
            return super().forward_encoder(imgs, mask_noise)

    with pytest.raises(UnsupportedModuleError, match="overrides MaskedAutoencoder.forward_encoder"):
        ghost.check_supported(Other(MAE_SIZES["toy"]))
    model = build_mae("toy")
    model.extra = nn.Parameter(torch.zeros(3, 2))  # a root parameter that is not a batch-broadcast token
    with pytest.raises(UnsupportedModuleError, match="root parameter 'extra'"):
        ghost.check_supported(model)


def test_trained_position_embedding_is_a_token_too():
    torch.manual_seed(0)
    model = build_mae("toy")
    model.pos_embed.requires_grad_(True)
    imgs, noise = _batch(model.cfg, 4)
    grads, norms, losses = _reference(model, imgs, noise)
    ref, _ = clip_and_sum(grads, float(norms.median()))
    summed, fast_norms, _ = ghost_clip_and_sum(model, imgs, noise, float(norms.median()))
    assert _rel(fast_norms, norms) <= 1e-5 and _rel(summed["pos_embed"], ref["pos_embed"]) <= 1e-5


def test_bf16_autocast_runs_and_stays_close_to_float32_reference():
    # CPU autocast stands in for CUDA's here (no GPU in the test suite): same code path, bf16 matmuls
    torch.manual_seed(0)
    model = build_mae("vip_toy")
    imgs, noise = _batch(model.cfg, 4)
    grads, norms, _ = _reference(model, imgs, noise)
    clip = float(norms.median())
    ref, _ = clip_and_sum(grads, clip)
    summed, fast_norms, _ = ghost_clip_and_sum(model, imgs, noise, clip, autocast_dtype=torch.bfloat16)
    assert all(v.dtype == torch.float32 for v in summed.values())
    assert float(((fast_norms - norms).abs() / norms).max()) < 0.05  # bf16 has 8 bits of mantissa
    flat = torch.cat([summed[k].flatten() for k in ref])
    flat_ref = torch.cat([ref[k].flatten() for k in ref])
    assert torch.nn.functional.cosine_similarity(flat, flat_ref, dim=0) > 0.99
    # the released sum is bounded by B*C in the arithmetic used (each example scaled by min(1, C/norm))
    assert float(flat.norm()) <= 4 * clip * (1 + 1e-5)


def _contributions(model, imgs, noise, clip, monkeypatch, **kw):
    """Each example's clipped contribution to the sum, in the arithmetic the sum uses: the sum with every other
    example's clip factor set to 0 (the sum is linear in the factors)."""
    real = ghost.clip_factors
    out = []
    for i in range(imgs.shape[0]):
        monkeypatch.setattr(ghost, "clip_factors",
                            lambda n, c, i=i: real(n, c) * (torch.arange(len(n)) == i).to(n.dtype))
        summed, _, _ = ghost_clip_and_sum(model, imgs, noise, clip, autocast_dtype=torch.bfloat16,
                                          low_precision_norms=True, **kw)
        out.append(float(torch.cat([v.flatten().double() for v in summed.values()]).norm()))
    monkeypatch.setattr(ghost, "clip_factors", real)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("plan", ["mixed", "ghost", "instantiate"])
def test_bf16_norms_never_under_estimate_and_every_contribution_stays_at_most_C(plan, monkeypatch):
    # with low_precision_norms the norms run in bf16 (Gram matrices, instantiated per-example weights); the ghost
    # ones inflated by low_precision_gram_bound. Reference: the same pass with float32 norms (the default).
    if plan != "mixed":
        monkeypatch.setattr(ghost, "layer_plan", lambda t, d_in, d_out: plan)
    torch.manual_seed(0)
    model = build_mae("vip_toy")
    imgs, noise = _batch(model.cfg, 6)
    _, n32, _ = ghost_clip_and_sum(model, imgs, noise, 1.0, autocast_dtype=torch.bfloat16)
    _, n16, _ = ghost_clip_and_sum(model, imgs, noise, 1.0, autocast_dtype=torch.bfloat16, low_precision_norms=True)
    ratio = n16 / n32
    # stated tolerance: never below (an instantiated bf16 gradient is itself what gets summed: its norm may sit a
    # bf16 rounding below the float32 one), and within 3 % above (bf16 ghost norms' bound: gamma = 0.023)
    assert float(ratio.min()) >= 1 - 2.0 ** -9 and float(ratio.max()) <= 1.03, ratio
    if plan == "ghost":
        assert float(ratio.min()) >= 1.0  # every norm a ghost norm: inflated, never under
    for clip in (0.5 * float(n32.min()), float(n32.median())):  # all clipped; some clipped
        contrib = _contributions(model, imgs, noise, clip, monkeypatch)
        assert float(contrib.max()) <= clip * (1 + 1e-5), (contrib / clip, clip)


@pytest.mark.parametrize("case", ["random", "cancelling", "one_token", "wide_range"])
def test_bf16_ghost_bound_against_float64_norms(case):
    # the bound alone, on pieces built to stress it, against the exact norm of sum_t g_t a_t^T in float64
    g_ = torch.Generator().manual_seed(0)
    b, t, d_in, d_out = 8, 33, 96, 160
    a = torch.randn(b, t, d_in, generator=g_)
    g = torch.randn(b, t, d_out, generator=g_)
    if case == "cancelling":  # token pairs that almost cancel: the norm is far below S = sum_t |a_t||g_t|
        a[:, 1::2] = a[:, 0:-1:2] * (1 + 1e-3 * torch.randn(b, t // 2, d_in, generator=g_))
        g[:, 1::2] = -g[:, 0:-1:2]
    elif case == "one_token":
        a, g = a[:, :1], g[:, :1]
    elif case == "wide_range":  # magnitudes over 30 decades, per example and per token
        a = a * torch.logspace(-15, 15, b).view(b, 1, 1) * torch.logspace(-3, 3, a.shape[1]).view(1, -1, 1)
        g = g * torch.logspace(15, -15, b).view(b, 1, 1)
    exact = torch.bmm(g.double().transpose(1, 2), a.double()).flatten(1).square().sum(1)
    layer = ghost._Layer("x", nn.Linear(d_in, d_out, bias=False), torch.bfloat16)
    layer.pieces = [(a, g)]
    raw = torch.linalg.vecdot(ghost._gram(a, torch.bfloat16).flatten(1).double(),
                              ghost._gram(g, torch.bfloat16).flatten(1).double())
    bound = layer.ghost_sq_norms()
    assert bool((bound >= exact).all()), (bound / exact)
    ga, gg = ghost.low_precision_gram_bound(d_in), ghost.low_precision_gram_bound(d_out)
    assert 0.0117 < ga < gg < 0.0125  # ~3 unit roundoffs of bf16
    s = (a.double().norm(dim=2) * g.double().norm(dim=2)).sum(1)
    # not looser than twice the crude bound (the Gram matrices' error, plus the inflation covering it)
    assert bool((bound <= exact + 2.02 * (ga + gg + 3 * ga * gg) * s.square()).all())
    if case == "cancelling":  # bf16 Gram matrices alone under-estimate here: the inflation is load-bearing
        assert bool((raw < exact * (1 - 1e-3)).any())


@pytest.mark.parametrize("which", ["weights", "block_linears"])
def test_only_weight_matrices_trainable_equals_vmap(which, monkeypatch):
    # no bias, LayerNorm or token trainable: nothing "small" to norm with the big ones (used to crash on an empty
    # concatenation); every weight through one of the two norm computations, as in the mixed plan
    torch.manual_seed(0)
    model = build_mae("toy")
    for name, p in model.named_parameters():
        keep = name.endswith(".weight") and p.ndim >= 2
        if which == "block_linears":
            keep = keep and name.startswith(("blocks.", "decoder_blocks."))
        p.requires_grad_(keep)
    trainable = [k for k, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(p.ndim >= 2 for p in model.parameters() if p.requires_grad)
    imgs, noise = _batch(model.cfg, 4)
    _assert_equals_reference(model, imgs, noise, *_reference(model, imgs, noise))
    monkeypatch.setattr(ghost, "layer_plan", lambda t, d_in, d_out: "ghost")
    _assert_equals_reference(model, imgs, noise, *_reference(model, imgs, noise))


def test_bench_profile_mode_times_every_part_and_restores_what_it_wrapped(tmp_path, monkeypatch):
    # benchmarks/bench_mae.py --profile (what the lead runs on a GPU): on the CPU at toy size, every part present
    # and within the step, and the functions it wrapped for timing are the originals again after
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "bench_mae.py")
    monkeypatch.syspath_prepend(os.path.dirname(path))
    spec = importlib.util.spec_from_file_location("bench_mae_under_test", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    before = (ghost.functional_call, torch.autograd.grad, ghost._Layer.process, ghost._Layer.ghost_sq_norms,
              ghost._Layer.ghost_weight_sum)
    parts = bench.profile_steps("toy", 4, None, None, torch.device("cpu"), None, 2, ["nonprivate", "ghost"])
    after = (ghost.functional_call, torch.autograd.grad, ghost._Layer.process, ghost._Layer.ghost_sq_norms,
             ghost._Layer.ghost_weight_sum)
    assert all(a is b for a, b in zip(before, after))
    assert set(parts["nonprivate"]) == {"forward", "backward (weight grads included)", "step"}
    g = parts["ghost"]
    for key in (bench._FORWARD, bench._BACKWARD, bench._GRAMS, bench._SUMS, bench._REST, "backward without the hooks"):
        assert 0 <= g[key][0] <= g["step"][0], key  # nested in the step, derived parts per run (never negative)
    assert any(k.startswith(bench._HOOKS) for k in g)
    out = tmp_path / "prof.md"
    bench.main(["--profile", "--size", "toy", "--batch", "4", "--repeats", "1", "--methods", "ghost",
                "--out", str(out)])
    text = out.read_text()
    assert "bench_mae profile toy" in text and "| nonprivate | **whole step** |" in text and "| ghost |" in text


def test_bf16_output_grads_are_kept_as_produced_not_copied_to_float32(monkeypatch):
    # under bf16 autocast every linear output grad is bf16: the ghost pieces keep them so (half the memory held
    # through the backward); norms and sums still run in float32 from those exact values
    seen = []
    real = ghost._Layer.ghost_sq_norms

    def record(self):
        seen.extend(g.dtype for _, g in self.pieces)
        return real(self)
    monkeypatch.setattr(ghost._Layer, "ghost_sq_norms", record)
    torch.manual_seed(0)
    model = build_mae("vip_toy")
    imgs, noise = _batch(model.cfg, 4)
    summed, norms, _ = ghost_clip_and_sum(model, imgs, noise, 0.05, autocast_dtype=torch.bfloat16)
    assert seen and set(seen) == {torch.bfloat16}
    assert norms.dtype == torch.float32 and all(v.dtype == torch.float32 for v in summed.values())
    # the same pass with every piece copied to float32 first (what the path did before): same numbers
    monkeypatch.setattr(ghost, "_linear_io", lambda *a, _real=ghost._linear_io: tuple(x.float() for x in _real(*a)))
    ref, ref_norms, _ = ghost_clip_and_sum(model, imgs, noise, 0.05, autocast_dtype=torch.bfloat16)
    torch.testing.assert_close(norms, ref_norms, rtol=1e-6, atol=0)
    for k in ref:
        torch.testing.assert_close(summed[k], ref[k], rtol=1e-6, atol=1e-9, msg=k)


def _tf32(x):
    """x rounded to TF32 by truncation (10 of float32's 23 significand bits kept): the worst case of the bound."""
    return (x.float().contiguous().view(torch.int32) & -8192).view(torch.float32)


def _emulated_tf32_mm(x, y, tf32):
    # what a TF32 tensor core computes: rounded inputs, exact products (11 x 11 significand bits), float32 sums
    return _tf32(x).t() @ _tf32(y) if tf32 else x.t() @ y


@pytest.mark.parametrize("case", ["random", "cancelling"])
def test_tf32_book_keeping_bound_against_float64(case):
    # one ghost layer, pieces built to stress the bound: each example's TF32 contribution at scale c stays within
    # c (||G|| + gamma S) of nothing more, ||G|| exact in float64
    g_ = torch.Generator().manual_seed(1)
    b, t, d_in, d_out = 6, 40, 96, 160
    a = torch.randn(b, t, d_in, generator=g_)
    g = torch.randn(b, t, d_out, generator=g_)
    if case == "cancelling":  # token pairs that almost cancel: ||G|| far below S
        a[:, 1::2] = a[:, 0::2] * (1 + 1e-4 * torch.randn(b, t // 2, d_in, generator=g_))
        g[:, 1::2] = -g[:, 0::2]
    layer = ghost._Layer("x", nn.Linear(d_in, d_out, bias=False))
    layer.pieces = [(a, g)]
    s = layer.token_norm_products()
    exact_s = (a.double().norm(dim=2) * g.double().norm(dim=2)).sum(1)
    assert bool((s >= exact_s).all()) and bool((s <= exact_s * (1 + 1e-4)).all())  # its float32 margin: 4e-5
    exact = torch.bmm(g.double().transpose(1, 2), a.double()).flatten(1).norm(dim=1)
    gamma = ghost.tf32_sum_bound()
    assert 0.00195 < gamma < 0.00196  # ~2 x 2^-10
    c = 1.0 / (exact + gamma * s)  # the clip factor for C = 1 with the inflated norm
    over = []
    for i in range(b):
        scale = (torch.arange(b) == i).float() * float(c[i])
        one = layer.ghost_weight_sum(scale, None, tf32=False)  # float32 reference of the same example
        gi, ai = (g * scale.view(-1, 1, 1)).reshape(-1, d_out), a.reshape(-1, d_in)
        contrib = float(_emulated_tf32_mm(gi, ai, True).double().norm())
        assert contrib <= 1.0 + 1e-5, (case, i, contrib)
        assert float(one.double().norm()) <= 1.0 + 1e-5
        over.append(contrib / (float(c[i]) * float(exact[i])))
    if case == "cancelling":  # the rounding alone moves a contribution past c ||G||: the inflation is load-bearing
        assert max(over) > 1.0 + 1e-3, over


@pytest.mark.parametrize("plan", ["mixed", "ghost"])
def test_tf32_sums_every_contribution_stays_at_most_C(plan, monkeypatch):
    # tf32_sums on the real model, the TF32 GEMM emulated on the CPU (the CUDA path rounds the same inputs)
    if plan != "mixed":
        monkeypatch.setattr(ghost, "layer_plan", lambda t, d_in, d_out: plan)
    monkeypatch.setattr(ghost, "_book_keeping_mm", _emulated_tf32_mm)
    torch.manual_seed(0)
    model = build_mae("vip_toy")
    imgs, noise = _batch(model.cfg, 6)
    _, n32, _ = ghost_clip_and_sum(model, imgs, noise, 1.0)
    _, ntf, _ = ghost_clip_and_sum(model, imgs, noise, 1.0, tf32_sums=True)
    assert bool((ntf >= n32).all()) and bool((ntf <= n32 * 1.01).all()), ntf / n32  # inflated, a little
    for clip in (0.5 * float(n32.min()), float(n32.median())):
        real = ghost.clip_factors
        contrib = []
        for i in range(imgs.shape[0]):
            monkeypatch.setattr(ghost, "clip_factors",
                                lambda n, c, f=None, i=i: real(n, c, f) * (torch.arange(len(n)) == i).to(n.dtype))
            summed, _, _ = ghost_clip_and_sum(model, imgs, noise, clip, tf32_sums=True)
            contrib.append(float(torch.cat([v.flatten().double() for v in summed.values()]).norm()))
        monkeypatch.setattr(ghost, "clip_factors", real)
        assert max(contrib) <= clip * (1 + 1e-5), [x / clip for x in contrib]
        ref, _, _ = ghost_clip_and_sum(model, imgs, noise, clip)
        got, _, _ = ghost_clip_and_sum(model, imgs, noise, clip, tf32_sums=True)
        flat, flat_ref = (torch.cat([d[k].flatten() for k in sorted(ref)]) for d in (got, ref))
        # truncated TF32 inputs (the worst case; tensor cores round) and norms 0.06-0.3 % larger: close to float32
        assert float((flat - flat_ref).norm() / flat_ref.norm()) < 5e-3
