"""DP-MAE after the budget is charged: no private value decides whether the run goes on, or what it prints.

A non-finite image (NaN, inf, an overflow) contributes exactly nothing, as the null image of the zero-out relation;
only public values (the noisy update, the new weights) may stop a run; the noise-free training loss is shown only
on request, with a warning.
"""
import warnings

import numpy as np
import pytest
import torch

import backbones.mae.trainer as train_mod
from backbones.mae.data import TensorImages, normalize
from backbones.mae.dp import PrivacyLeakWarning
from backbones.mae.model import build_mae
from backbones.mae.per_example import clip_and_sum, clipped_grad_sum, per_example_grads, split_params
from backbones.mae.synthetic import ShaderImages
from backbones.mae.train import TrainSettings, main, train
from test_mae import _one_thread  # noqa: F401  (autouse: one torch thread, as in test_mae)

pytestmark = pytest.mark.filterwarnings("ignore:--.*-seed makes the DP:UserWarning")


def _batch(cfg, b, seed=0):
    imgs = normalize(ShaderImages(cfg.img_size, seed=seed)[np.arange(b)])
    return imgs, torch.rand(b, cfg.num_patches, generator=torch.Generator().manual_seed(seed))


def _flat(summed, keys):
    return torch.cat([summed[k].flatten() for k in keys])


@pytest.mark.parametrize("method", ["ghost", "vmap"])
@pytest.mark.parametrize("bad", ["nan", "inf", "one_nan_pixel"])
def test_a_non_finite_image_contributes_exactly_nothing(method, bad):
    torch.manual_seed(0)
    model = build_mae("vip_toy")
    imgs, noise = _batch(model.cfg, 6)
    poisoned = imgs.clone()
    if bad == "one_nan_pixel":
        poisoned[2, 1, 5, 7] = float("nan")
    else:
        poisoned[2] = float(bad)
    poisoned[4] = -float("inf")  # a second one, of the other sign
    keep = torch.tensor([0, 1, 3, 5])
    clip = 0.05
    summed, norms, losses = clipped_grad_sum(model, poisoned, noise, clip, method=method)
    ref, ref_norms, ref_losses = clipped_grad_sum(model, imgs[keep], noise[keep], clip, method=method)
    keys = sorted(ref)
    flat, flat_ref = _flat(summed, keys), _flat(ref, keys)
    assert bool(torch.isfinite(flat).all())
    assert not torch.isfinite(norms[[2, 4]]).any()  # what made them drop out
    # the others' norms and losses are untouched by their neighbours in the batch (no mixing across examples)
    torch.testing.assert_close(norms[keep], ref_norms, rtol=1e-5, atol=0)
    torch.testing.assert_close(losses[keep], ref_losses, rtol=1e-6, atol=0)
    # the sum is the sum without them: float32 rounding of a longer reduction at most
    assert float((flat - flat_ref).norm() / flat_ref.norm()) <= 1e-6
    # alone in a batch, a non-finite image gives an exact zero (what a null image gives)
    alone, _, _ = clipped_grad_sum(model, poisoned[2:3], noise[2:3], clip, method=method)
    assert all(bool((v == 0).all()) for v in alone.values())


def test_vmap_reference_drops_a_finite_gradient_whose_loss_is_not_finite():
    # the rule is per example on its norm and its loss: the vmap reference and the ghost path agree on it
    torch.manual_seed(0)
    model = build_mae("toy")
    imgs, noise = _batch(model.cfg, 3)
    trainable, frozen = split_params(model)
    grads, _ = per_example_grads(model, trainable, frozen, imgs, noise)
    finite = torch.tensor([True, False, True])
    summed, _ = clip_and_sum(grads, 1e-3, finite=finite)
    ref, _ = clip_and_sum({k: g[finite] for k, g in grads.items()}, 1e-3)
    for k in ref:
        torch.testing.assert_close(summed[k], ref[k], rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("method", ["ghost", "vmap"])
def test_an_extreme_image_stays_bounded(method):
    # pixels at 1e30: finite, but the squared norms overflow float32; dropped or clipped, never more than C
    torch.manual_seed(0)
    model = build_mae("vip_toy")
    imgs, noise = _batch(model.cfg, 3)
    imgs[1] *= 1e30
    clip = 0.05
    summed, _, _ = clipped_grad_sum(model, imgs, noise, clip, method=method)
    flat = _flat(summed, sorted(summed))
    assert bool(torch.isfinite(flat).all()) and float(flat.norm()) <= 3 * clip * (1 + 1e-5)


def _poisoned_source(monkeypatch, bad_index):
    """digits with image ``bad_index`` all NaN (a damaged private image that decodes)."""
    real = train_mod.make_source

    def make_source(spec, size, seed=0):
        source, private = real(spec, size, seed=seed)
        images = source[np.arange(len(source))].clone()
        images[bad_index] = float("nan")
        return TensorImages(images), private
    monkeypatch.setattr(train_mod, "make_source", make_source)


def _dp(tmp_path, name, **kw):
    base = dict(size="toy", data="digits", dp=True, steps=1, physical_batch=4, lr=1e-3, warmup_steps=1, seed=0,
                noise_seed=1, sample_seed=2, clip=0.1, noise_multiplier=2.0, accountant="rdp", log_every=1,
                ckpt_every=1, out=str(tmp_path / name))
    base.update(kw)
    return TrainSettings(**base)


def _weights(result):
    return torch.load(result["checkpoint"], weights_only=True)["model"]


@pytest.mark.parametrize("method", ["ghost", "vmap"])
def test_a_nan_image_in_a_dp_step_is_a_null_image_same_noise(tmp_path, monkeypatch, method):
    # the sample is fixed (same noise seed, same step): with the NaN image last, alone in its physical batch, and
    # without it; it keeps its slot, so every other image keeps its mask row. The run completes and its weights
    # are bit for bit those of the run without the image.
    bad = 7
    _poisoned_source(monkeypatch, bad)
    sample = {"with": torch.tensor([10, 20, 30, 40, bad]), "without": torch.tensor([10, 20, 30, 40])}
    out = {}
    for name, idx in sample.items():
        monkeypatch.setattr(train_mod, "poisson_sample", lambda n, q, g, idx=idx: idx.clone())
        out[name] = train(_dp(tmp_path, name, per_example=method), progress=False)
    a, b = _weights(out["with"]), _weights(out["without"])
    for k in a:
        assert bool(torch.isfinite(a[k]).all()), k
        assert torch.equal(a[k], b[k]), k


def test_a_dp_run_over_a_nan_image_completes(tmp_path, monkeypatch):
    # the real Poisson sample, several steps: the damaged image is in some samples and stops nothing
    _poisoned_source(monkeypatch, 3)
    r = train(_dp(tmp_path, "run", steps=3, sample_rate=0.5, physical_batch=64), progress=False)
    assert r["step"] == 3 and all(bool(torch.isfinite(v).all()) for v in _weights(r).values())


def _overflow(monkeypatch, knob):
    """Step 2's noisy update is +inf, or the learning rate overflows the weights (both now refused as settings:
    injected here to exercise the stop)."""
    if knob == "noise_multiplier":
        real, calls = train_mod.reduce_and_privatize, []

        def fake(grad_sum, **kw):
            calls.append(1)
            out = real(grad_sum, **kw)
            return {k: torch.full_like(v, float("inf")) for k, v in out.items()} if len(calls) == 2 else out
        monkeypatch.setattr(train_mod, "reduce_and_privatize", fake)
    else:  # weight decay at lr 1e37 takes the weights past float32 at step 2
        monkeypatch.setattr(train_mod, "lr_at", lambda step, s: 1e37)


@pytest.mark.parametrize("knob, flag", [("lr", "--lr"), ("noise_multiplier", "--noise-multiplier")])
def test_non_finite_public_values_stop_with_one_line(tmp_path, monkeypatch, knob, flag):
    # an overflowing step size or noisy update: public values, a clear stop at step 2
    _overflow(monkeypatch, knob)
    s = _dp(tmp_path, knob, steps=3, sample_rate=0.005)
    with pytest.raises(FloatingPointError, match=f"step 2 (are|is) not finite .*lower {flag}"):
        train(s, progress=False)


def test_non_finite_public_values_are_one_line_on_the_command_line(tmp_path, capsys, monkeypatch):
    _overflow(monkeypatch, "lr")
    rc = main(["--size", "toy", "--data", "digits", "--dp", "--noise-multiplier", "2", "--sample-rate", "0.005",
               "--steps", "2", "--noise-seed", "1", "--sample-seed", "2", "--no-progress",
               "--out", str(tmp_path / "cli")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len([line for line in err if "not finite" in line]) == 1 and "Traceback" not in "\n".join(err)


def test_dp_run_shows_public_values_only_unless_asked(tmp_path, capsys):
    args = ["--size", "toy", "--data", "digits", "--dp", "--noise-multiplier", "2", "--sample-rate", "0.005",
            "--steps", "2", "--log-every", "1", "--accountant", "rdp", "--noise-seed", "1", "--sample-seed", "2"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(args + ["--out", str(tmp_path / "quiet")]) == 0
    captured = capsys.readouterr()
    assert not [w for w in caught if "training loss" in str(w.message)]
    final = captured.out.strip().splitlines()[-1]
    assert "loss" not in final and "epsilon=" in final
    assert "loss" not in captured.err and "eps=" in captured.err and "img/s=" in captured.err  # the progress bar

    with pytest.warns(PrivacyLeakWarning, match="not differentially private"):
        assert main(args + ["--show-loss", "--out", str(tmp_path / "loud")]) == 0
    captured = capsys.readouterr()
    assert "loss" in captured.out.strip().splitlines()[-1] and "loss=" in captured.err


def test_dp_train_returns_no_loss_by_default(tmp_path):
    r = train(_dp(tmp_path, "api", steps=2, sample_rate=0.005), progress=False)
    assert r["loss"] is None and all(h[1] is None for h in r["history"])
    with pytest.warns(PrivacyLeakWarning, match="computed on private images"):
        r = train(_dp(tmp_path, "api_loss", steps=2, sample_rate=0.005), progress=False, show_loss=True)
    assert isinstance(r["loss"], float)


def test_a_nan_image_under_bf16_autocast_and_bf16_norms_contributes_nothing():
    # the low-precision path (bf16 Gram matrices + rounding bound, bf16 instantiated gradients) drops it too
    from backbones.mae.ghost import ghost_clip_and_sum

    torch.manual_seed(0)
    model = build_mae("vip_toy")
    imgs, noise = _batch(model.cfg, 5)
    poisoned = imgs.clone()
    poisoned[1] = float("nan")
    keep = torch.tensor([0, 2, 3, 4])
    for low in (False, True):
        summed, norms, _ = ghost_clip_and_sum(model, poisoned, noise, 0.05, autocast_dtype=torch.bfloat16,
                                              low_precision_norms=low)
        ref, _, _ = ghost_clip_and_sum(model, imgs[keep], noise[keep], 0.05, autocast_dtype=torch.bfloat16,
                                       low_precision_norms=low)
        flat, flat_ref = _flat(summed, sorted(ref)), _flat(ref, sorted(ref))
        assert bool(torch.isfinite(flat).all()) and not bool(torch.isfinite(norms[1]))
        assert float((flat - flat_ref).norm() / flat_ref.norm()) <= 1e-5, low
