"""Quickstart: digits → frozen features → private linear probes at ε ∈ {0.5, 1, 2, 4, 8} → table, CSV and plot.

Runs offline in about a minute on a 2-core CPU::

    python -m experiments.quickstart                 # writes runs/quickstart/{*.zarr, quickstart.csv, quickstart.png}
    python -m experiments.quickstart --out /tmp/qs --backbones pixels

What it does, and what is private:

1. ``featurize`` scikit-learn's embedded 8×8 digits (1437 train / 360 test rows) with the shipped small backbone
   ``vip_toy`` (a ViT trained by the project's DP-MAE code on synthetic images only) and with ``pixels`` (no
   network: the resized image itself), into feature stores.  Rerunning resumes/skips finished stores.
2. On each store, one :func:`privlin.sweep.sweep` trains every (method, ε) privately, sharing data passes.
   Settings are fixed in advance, not tuned on digits' accuracy: ``DPLinearClassifier``'s defaults for
   ``adam1`` and ``sgd`` (the plan's rules, :mod:`privlin.plan`), rows normalized to norm 1 = the clip norm and
   privately centered with 10% of the budget (:data:`CENTER_SHARE`); δ = 1e-5; zero-out neighbours (N public).
   Each point is the mean over ``--seeds`` noise draws from OS entropy.  Every fit is charged to the ledger
   beside the store.
3. The dashed lines are non-private references: k-NN accuracy (faiss, cosine, k=10) on the same features.

The class list (the digits 0–9) is public; accuracies are on the test split, which is only evaluated, never used
to choose anything.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DELTA = 1e-5
BACKBONES = ("vip_toy", "pixels")
#: Share of the GDP budget μ² spent on private centering.  Larger than DP-RandP's 0.2–0.4% because the small
#: ViT's features are nearly collinear (cosine ≈ 0.9997 between any two rows, a property of the backbone):
#: uncentered, every linear probe of them stays near chance.
CENTER_SHARE = 0.1


def fixed_settings(delta: float = DELTA):
    """The quickstart's settings (estimator parameters): both methods at every ε, decided before any data."""
    return [dict(method=m, epsilon=eps, delta=delta, center_share=CENTER_SHARE)
            for eps in EPSILONS for m in ("adam1", "sgd")]


def build_store(backbone: str, out_dir: str, *, progress: bool = True) -> str:
    """Featurize digits with ``backbone`` into ``out_dir/<backbone>_digits.zarr`` (resumes, skips when done)."""
    import featurize

    path = os.path.join(out_dir, f"{backbone}_digits.zarr")
    featurize.extract(backbone, "digits", out=path, device="cpu", num_workers=0, batch_size=256,
                      progress=progress)
    return path


def run_store(path: str, label: str, *, seeds: int = 3, progress: bool = False) -> tuple[list[dict], float]:
    """Sweep the fixed settings on one store (``seeds`` noise draws); returns (rows, k-NN reference accuracy)."""
    import stores
    from privlin.knn import knn_accuracy
    from privlin.sweep import sweep

    st = stores.open(path)  # its published class list (the digits 0-9) is the public class list
    base = fixed_settings()
    # every noise draw is its own setting with its own key: one sweep, shared passes, all charged together
    res = sweep(st, settings=base * seeds, progress=progress)
    rows = []
    for i, r in enumerate(res.records):
        rows.append({"backbone": label, "method": r["method"], "label": f"{label} / {r['method']}",
                     "draw": i // len(base), **{k: r[k] for k in ("epsilon", "achieved_epsilon", "delta",
                                                                  "noise_multiplier", "center_noise_multiplier",
                                                                  "learning_rate", "steps", "clip", "accuracy")}})
    knn = knn_accuracy(st["train"], st["test"], k=10)
    return rows, knn.accuracy


def summarize(rows: list[dict]) -> list[dict]:
    """Mean and std of accuracy over seeds per (backbone, method, ε)."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["backbone"], r["method"], r["epsilon"]), []).append(r["accuracy"])
    return [{"backbone": b, "method": m, "epsilon": e, "accuracy": float(np.mean(a)), "std": float(np.std(a)),
             "seeds": len(a)} for (b, m, e), a in sorted(groups.items())]


def format_table(summary: list[dict], knn: dict[str, float]) -> str:
    """Accuracy (%) per (backbone, method) row and ε column, plus the non-private k-NN column."""
    lines = ["| features / method | " + " | ".join(f"ε={e:g}" for e in EPSILONS) + " | k-NN (non-private) |",
             "|---|" + "---:|" * (len(EPSILONS) + 1)]
    by = {(s["backbone"], s["method"], s["epsilon"]): s for s in summary}
    for b in dict.fromkeys(s["backbone"] for s in summary):
        for m in dict.fromkeys(s["method"] for s in summary if s["backbone"] == b):
            cells = [f"{100 * by[(b, m, e)]['accuracy']:.1f}" for e in EPSILONS]
            lines.append(f"| {b} / {m} | " + " | ".join(cells) + f" | {100 * knn[b]:.1f} |")
    return "\n".join(lines)


def write_csv(rows: list[dict], path: str) -> None:
    import csv

    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.quickstart", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join("runs", "quickstart"), help="output folder (default runs/quickstart)")
    p.add_argument("--backbones", default=",".join(BACKBONES), help="comma-separated registry names")
    p.add_argument("--seeds", type=int, default=3, help="noise draws per point (default 3)")
    p.add_argument("--docs", action="store_true", help="also copy the PNG to docs/quickstart.png")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error("--seeds must be >= 1")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    all_rows, knn = [], {}
    for bb in [b.strip() for b in args.backbones.split(",") if b.strip()]:
        t = time.time()
        try:
            path = build_store(bb, args.out, progress=not args.no_progress)
        except Exception as e:  # noqa: BLE001 - say which backbone and why, keep going with the others
            print(f"quickstart: skipping {bb}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        t_feat = time.time() - t
        rows, knn[bb] = run_store(path, bb, seeds=args.seeds)
        all_rows += rows
        print(f"[{bb}] features {t_feat:.1f} s, {len(rows)} private fits {time.time() - t - t_feat:.1f} s -> {path}",
              file=sys.stderr)
    if not all_rows:
        print("quickstart: no backbone could be featurized", file=sys.stderr)
        return 1
    summary = summarize(all_rows)
    csv_path = os.path.join(args.out, "quickstart.csv")
    write_csv(summary, csv_path)
    write_csv(all_rows, os.path.join(args.out, "quickstart_runs.csv"))
    from experiments.plotting import plot_privacy_curves

    png = plot_privacy_curves([{**s, "label": f"{s['backbone']} / {s['method']}"} for s in summary],
                              os.path.join(args.out, "quickstart.png"),
                              references={f"{b} k-NN (non-private)": a for b, a in knn.items()},
                              title=f"digits: private linear probes (mean of {args.seeds} noise draws)", delta=DELTA)
    if args.docs:
        import shutil
        os.makedirs("docs", exist_ok=True)
        shutil.copyfile(png, os.path.join("docs", "quickstart.png"))
    print(format_table(summary, knn))
    print(f"\nδ = {DELTA:g}, zero-out neighbours (N public); each ε is one model's guarantee (every fit is in the "
          f"ledger beside its store).\nwrote {csv_path} and {png} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
