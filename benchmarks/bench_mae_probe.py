"""Do the project's MAE encoders beat a random init? Digits linear probe, same probe, same epsilon.

Encoders (same timm ViT, 32 px, patch 4, dim 128, depth 6):

* ``random``: timm's initialization, seed 0;
* ``vip_toy``: MAE pretrained on procedural shader images (no private data);
* ``vip_toy_dp``: ``vip_toy``'s MAE then DP-AdamW trained on digits/train at epsilon=8.

Probe: ``privlin.DPLinearClassifier`` (defaults, epsilon/delta below) on the
frozen features of digits/train, accuracy on digits/test, over several probe
seeds; plus a non-private scikit-learn logistic regression for reference.
Features are computed here with the timm model directly, preprocessing as the
registry's ``vip_toy`` (bicubic to 32 px, ImageNet mean/std).

Privacy: the probe is (epsilon_probe, delta)-DP w.r.t. digits/train; for
``vip_toy_dp`` the encoder itself also used digits/train (its own epsilon in
``backbones/weights/vip_toy_dp.json``), so that pipeline's total is the
composition of the two.

    python benchmarks/bench_mae_probe.py [--epsilon 8] [--seeds 5]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from timm.models.vision_transformer import VisionTransformer  # noqa: E402

from backbones.mae.data import digits_split, normalize  # noqa: E402
from _results import write_section  # noqa: E402  (benchmarks/ is sys.path[0] when run as a script)
from backbones.mae.model import MAE_SIZES  # noqa: E402


def _weights(name: str) -> str:
    """``NAME`` (a file in backbones/weights) or ``NAME=PATH``."""
    return name.split("=", 1)[1] if "=" in name else os.path.join(ROOT, "backbones", "weights", f"{name}.pth")


def encoder(name: str) -> VisionTransformer:
    from backbones.checkpoints import read_checkpoint  # verifies the tensor sha256 of DP-MAE exports

    torch.manual_seed(0)
    vit = VisionTransformer(**MAE_SIZES["vip_toy"].timm_kwargs()).eval()
    if name != "random":
        vit.load_state_dict({k: v.float() for k, v in read_checkpoint(_weights(name)).items()}, strict=True)
    return vit


def features(vit, imgs, pool):
    with torch.inference_mode():
        tokens = vit.forward_features(normalize(imgs))
    return (tokens[:, 0] if pool == "cls" else tokens[:, 1:].mean(1)).numpy().astype(np.float32)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--epsilon", type=float, default=8.0)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--encoders", nargs="+", default=["random", "vip_toy", "vip_toy_dp"],
                    help="NAME (backbones/weights/NAME.pth) or NAME=PATH")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "mae.md"))
    args = ap.parse_args(argv)
    import privlin
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    xtr, ytr = digits_split("train", 32)
    xte, yte = digits_split("test", 32)
    delta = 1.0 / (2 * len(ytr))
    rows = []
    for name in args.encoders:
        if name != "random" and not os.path.exists(_weights(name)):
            print(f"skip {name}: no weights")
            continue
        vit = encoder(name)
        for pool in ("cls", "gap"):
            ftr, fte = features(vit, xtr, pool), features(vit, xte, pool)
            accs, eps = [], None
            for seed in range(args.seeds):
                clf = privlin.DPLinearClassifier(epsilon=args.epsilon, delta=delta, classes=list(range(10)),
                                                 random_state=seed).fit(ftr, ytr)
                accs.append(float(np.mean(clf.predict(fte) == yte)))
                eps = clf.privacy_
            sc = StandardScaler().fit(ftr)
            ref = LogisticRegression(max_iter=3000).fit(sc.transform(ftr), ytr).score(sc.transform(fte), yte)
            row = (f"| {name.split('=')[0]} | {pool} | {100 * np.mean(accs):.1f} ± {100 * np.std(accs):.1f} | "
                   f"{100 * ref:.1f} |")
            print(row, flush=True)
            rows.append(row)
    enc_eps = ""
    meta = os.path.join(ROOT, "backbones", "weights", "vip_toy_dp.json")
    if os.path.exists(meta):
        p = json.load(open(meta))["privacy"]
        enc_eps = (f" vip_toy_dp encoder: epsilon={p['epsilon']:.2f}, delta={p['delta']:.0e} "
                   f"({p.get('neighboring_relation', 'add/remove')}, {p['accountant']}, "
                   f"sigma={p['noise_multiplier']:.3f}, q={p['sample_rate']}, {p.get('steps', '?')} steps, "
                   f"C={p['clip']}, {'SEEDED' if p.get('seeded') else 'secret sample and noise'}).")
    header = (f"### DP-MAE encoders vs random init: digits linear probe (benchmarks/bench_mae_probe.py)\n\n"
              f"privlin.DPLinearClassifier defaults at epsilon={args.epsilon}, delta={delta:.2e} (add/remove one "
              f"image), trained on digits/train (1437), accuracy on digits/test (360), mean ± sd over "
              f"{args.seeds} probe seeds; non-private logistic regression (standardized features) for reference."
              f"{enc_eps} 2-core CPU, shared.\n\n"
              f"| encoder | feature | DP probe acc % (ε={args.epsilon:g}) | non-private LR acc % |\n|---|---|---|---|")
    write_section(args.out, "bench_mae_probe", header + "\n" + "\n".join(rows))
    print(header + "\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
