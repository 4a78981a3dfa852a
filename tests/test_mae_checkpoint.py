"""What a DP-MAE checkpoint holds: the weights and optimizer state, and nothing else computed from private images."""
import pytest
import torch

import backbones.mae.trainer as train_mod
from backbones.mae.checkpoint import load_checkpoint
from backbones.mae.train import TrainSettings, train
from test_mae import _one_thread  # noqa: F401  (autouse: one torch thread, as in test_mae)

pytestmark = [pytest.mark.filterwarnings("ignore:the training loss shown:UserWarning"),
              pytest.mark.filterwarnings("ignore:--.*-seed makes the DP:UserWarning")]


def _tensors(tree, path=""):
    if isinstance(tree, torch.Tensor):
        yield path, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from _tensors(v, f"{path}/{k}")
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _tensors(v, f"{path}/{i}")


def test_dp_checkpoint_holds_no_loss_history_no_sample_size_and_no_generator_state(tmp_path, monkeypatch):
    sizes = []
    real_sample = train_mod.poisson_sample

    def recording(n, q, g):
        out = real_sample(n, q, g)
        sizes[-1].append(len(out))
        return out

    monkeypatch.setattr(train_mod, "poisson_sample", recording)
    ckpts = []
    for sample_seed in (2, 3):  # two runs that differ only in their (secret) Poisson samples
        sizes.append([])
        (tmp_path / str(sample_seed)).mkdir()
        monkeypatch.chdir(tmp_path / str(sample_seed))  # the same --out (a setting stored in the checkpoint)
        s = TrainSettings(size="toy", data="digits", dp=True, steps=3, sample_rate=0.005, physical_batch=8, lr=1e-3,
                          warmup_steps=1, seed=0, noise_seed=1, sample_seed=sample_seed, clip=0.1,
                          noise_multiplier=2.0, accountant="rdp", log_every=1, ckpt_every=1,
                          out="run")
        ckpts.append(load_checkpoint(train(s, progress=False)["checkpoint"]))  # verifies the file's sha256
    assert sizes[0] != sizes[1] and sum(sizes[0]) != sum(sizes[1]), sizes  # different sample sizes
    a, b = ckpts
    assert set(a) == {"model", "optimizer", "step", "rng", "accountant", "config", "history"}
    assert a["history"] is None and a["rng"] == {}  # no noise-free losses, no generator state
    assert a["accountant"]["steps"] == 3 and a["step"] == 3

    # every part but the weights and the optimizer state is identical: nothing in it depends on the samples
    # but the ledger run id: a fresh random uuid per run (what a resume charges under), independent of the data
    runs = [c["config"].pop("ledger_run") for c in (a, b)]
    assert all(len(r) == 32 and int(r, 16) >= 0 for r in runs) and runs[0] != runs[1]
    public = {k: v for k, v in a.items() if k not in ("model", "optimizer")}
    assert public == {k: v for k, v in b.items() if k not in ("model", "optimizer")}
    assert not list(_tensors(public))
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]  # lr, betas, decay: public settings
    # every tensor is a weight or an AdamW moment / step count of one (the step count is the public step)
    assert {p for p, _ in _tensors(a["model"])} == {f"/{k}" for k in a["model"]}
    for path, t in _tensors(a["optimizer"]):
        assert path.startswith("/state/") and path.rsplit("/", 1)[1] in ("step", "exp_avg", "exp_avg_sq"), path
        if path.endswith("/step"):
            assert float(t) == 3
    assert not torch.equal(a["model"]["blocks.0.attn.qkv.weight"], b["model"]["blocks.0.attn.qkv.weight"])


def test_dp_export_provenance_records_no_wall_time(tmp_path):
    # a DP run's duration grows with its Poisson sample sizes: the released JSON does not carry it
    import json

    s = TrainSettings(size="toy", data="digits", dp=True, steps=1, sample_rate=0.005, physical_batch=8,
                      noise_multiplier=2.0, accountant="rdp", out=str(tmp_path / "r"), export="enc.pth")
    train(s, progress=False)
    meta = json.load(open(tmp_path / "r" / "enc.json"))
    assert isinstance(meta["wall_seconds"], str) and "not recorded" in meta["wall_seconds"]
    assert "not released" in meta["loss_curve"]


def test_dp_masks_are_keyed_by_seed_and_step_not_by_earlier_samples(tmp_path):
    # step t's mask noise is a function of (--seed, t) and the number of sampled slots only
    def run(seed):
        s = TrainSettings(size="toy", data="digits", dp=True, steps=1, sample_rate=0.005, seed=seed,
                          noise_multiplier=2.0, accountant="rdp", out=str(tmp_path / "x"))
        r = train_mod._Run(s, train_mod.make_source("digits", train_mod.MAE_SIZES["toy"].img_size, seed=seed)[0], 1437)
        rows = []
        for step in (0, 5):
            r.step = step
            rows.append(r._mask_noise(4))
        return rows, r._mask_noise(2)

    (a0, a5), a5_short = run(0)
    (b0, b5), _ = run(0)
    (c0, _), _ = run(1)
    assert torch.equal(a0, b0) and torch.equal(a5, b5)  # same seed and step: same masks
    assert not torch.equal(a0, a5) and not torch.equal(a0, c0)  # another step or another seed: others
    assert torch.equal(a5_short, a5[:2])  # a smaller sample keeps the first slots' masks
