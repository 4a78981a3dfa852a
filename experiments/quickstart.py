"""Quickstart: digits → frozen features → private linear probes at ε ∈ {0.5, 1, 2, 4, 8} → table, CSV and plot.

Runs offline in a couple of minutes on a 2-core CPU::

    python -m experiments.quickstart                 # writes runs/quickstart/{*.zarr, quickstart.csv, quickstart.png}
    python -m experiments.quickstart --out /tmp/qs --backbones pixels8

What it does, and what is private:

1. ``featurize`` scikit-learn's embedded 8×8 digits (1437 train / 360 test rows) with the shipped small backbone
   ``vip_toy`` (a ViT trained by the project's DP-MAE code on synthetic images only) and with ``pixels8`` (no
   network: the digit's own 8×8 pixels, 192-d), into feature stores.  Rerunning resumes/skips finished stores.
   ``pixels8`` rather than the 32×32 ``pixels`` (3072-d): the same digits, and whitening 3072-d rows costs a
   3073 × 3073 float64 eigendecomposition per whitened ``sgd`` setting, which would make the quickstart several
   times longer on a small CPU (BENCHMARKS.md, "The quickstart"); ``--backbones vip_toy,pixels`` runs it.
2. On each store, one :func:`privlin.sweep.sweep` trains every (method, ε) privately, sharing data passes.
   Settings are fixed in advance, not tuned on digits' accuracy: ``DPLinearClassifier``'s defaults for
   ``adam1`` and ``sgd`` (the plan's rules, :mod:`privlin.plan`: rows normalized to norm 1 = the clip norm,
   privately centered with 5% of the budget, and for ``sgd`` privately standardized with 15%, and whitened
   where that release resolves);
   δ = 1e-5; zero-out neighbours (N public).
   Each point is the mean ± sd over ``--seeds`` noise draws from OS entropy.  Every fit is charged to the digits'
   images in the ledger home.
3. The dashed lines are non-private references: k-NN accuracy (faiss, cosine, k=10) on the same features.
4. What it cost: each point's ε is one model's guarantee; producing the whole figure cost the composition of
   every fit on the store (privlin's sweep total, printed and written on the figure), and the ledger home keeps
   the images' running total (printed): both stores hold the same images, so their fits compose on one budget, and
   rerunning charges them again.  The k-NN reference is a non-private release on the train split, so that total is
   ∞.

The class list (the digits 0–9) is public; accuracies are on the test split, which is only evaluated, never used
to choose anything.  Every stage that runs longer than a few seconds (loading torch or JAX, featurizing, each
store's sweep, the k-NN reference, composing the ledgers, the plot) says so on stderr, with a line per store when it
is done; ``--no-progress`` silences that.  Arguments are parsed before torch or JAX is imported.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time

import cliconv as cli

from experiments import entry_point, results
from experiments.spent import earlier_entries, spent_line

PROG = "python -m experiments.quickstart"
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DELTA = 1e-5
BACKBONES = ("vip_toy", "pixels8")


def fixed_settings(delta: float = DELTA):
    """The quickstart's settings (estimator parameters): both methods at every ε, decided before any data."""
    return [dict(method=m, epsilon=eps, delta=delta)
            for eps in EPSILONS for m in ("adam1", "sgd")]


def build_store(backbone: str, out_dir: str, *, progress: bool = True) -> str:
    """Featurize digits with ``backbone`` into ``out_dir/<backbone>_digits.zarr`` (resumes, skips when done)."""
    import featurize

    path = os.path.join(out_dir, f"{backbone}_digits.zarr")
    featurize.extract(backbone, "digits", out=path, device="cpu", num_workers=0, batch_size=256,
                      progress=progress)
    return path


@dataclasses.dataclass
class StoreRun:
    """One store's part of the quickstart: per-draw rows, the k-NN reference, and what the fits were charged."""

    rows: list[dict]
    knn: float
    epsilon: float  #: the composition of every private fit (privlin.sweep's total_epsilon): what was charged
    delta: float
    fits: int


def run_store(path: str, label: str, *, seeds: int = 3, progress: bool = False) -> StoreRun:
    """Sweep the fixed settings on one store (``seeds`` noise draws) and compute the k-NN reference."""
    import stores
    from privlin.knn import knn_accuracy
    from privlin.sweep import sweep

    st = stores.open(path)  # its published class list (the digits 0-9) is the public class list
    base = fixed_settings()
    # every noise draw is its own setting with its own key: one sweep, shared passes, all charged together
    with cli.status(f"[{label}] {len(base) * seeds} private fits (one sweep)", enabled=progress):
        res = sweep(st, settings=base * seeds, progress=progress)
    rows = []
    for i, r in enumerate(res.records):
        rows.append({"backbone": label, "method": r["method"], "label": f"{label} / {r['method']}",
                     "draw": i // len(base), **{k: r[k] for k in ("epsilon", "achieved_epsilon", "delta",
                                                                  "noise_multiplier", "center_noise_multiplier",
                                                                  "learning_rate", "steps", "clip", "accuracy")}})
    with cli.status(f"[{label}] k-NN reference (non-private)", enabled=progress):
        knn = knn_accuracy(st["train"], st["test"], k=10)
    return StoreRun(rows, knn.accuracy, res.total_epsilon, res.total_delta, len(res.records))


def summarize(rows: list[dict]) -> list[dict]:
    """Accuracy (%) mean ± sd over the noise draws per (backbone, method, ε)."""
    return results.summarize(rows, by=("backbone", "method", "epsilon"), keep=("label", "achieved_epsilon", "delta"))


def format_table(summary: list[dict], knn: dict[str, float]) -> str:
    """Accuracy (%, mean ± sd over draws) per (backbone, method) row and ε column, plus the non-private k-NN."""
    lines = ["| features / method | " + " | ".join(f"ε={e:g}" for e in EPSILONS) + " | k-NN (non-private) |",
             "|---|" + "---:|" * (len(EPSILONS) + 1)]
    by = {(s["backbone"], s["method"], s["epsilon"]): s for s in summary}
    for b in dict.fromkeys(s["backbone"] for s in summary):
        for m in dict.fromkeys(s["method"] for s in summary if s["backbone"] == b):
            cells = [_cell(by[(b, m, e)]) for e in EPSILONS]
            lines.append(f"| {b} / {m} | " + " | ".join(cells) + f" | {100 * knn[b]:.1f} |")
    return "\n".join(lines)


def _cell(s: dict) -> str:
    return f"{s['accuracy_pct']:.1f}" + ("" if s["sd_pct"] is None else f" ± {s['sd_pct']:.1f}")


def _check_backbones(names: list[str], *, progress: bool = True) -> list[str]:
    """Every backbone known and its weights present, before anything is featurized or charged."""
    with cli.status("loading the backbones' registry (torch, timm)", enabled=progress):
        import backbones

    if not names:
        raise cli.UserError("--backbones names no backbone")
    for name in names:
        try:
            backbones.resolve_weights(backbones.get_config(name))
        except KeyError:
            raise cli.UserError(f"unknown backbone {name!r}; known: {backbones.list_backbones()}") from None
    return names


def build_parser():
    p = cli.parser(PROG, __doc__)
    p.add_argument("--out", type=cli.output_folder, default=os.path.join("runs", "quickstart"), help="output folder")
    p.add_argument("--backbones", default=",".join(BACKBONES), help="comma-separated registry names")
    p.add_argument("--seeds", type=cli.Interval(int, 1), default=3, help="noise draws per point")
    p.add_argument("--docs", action="store_true", help="also copy the PNG and the CSV to docs/")
    p.add_argument("--no-progress", action="store_true", help="no progress lines or bars on stderr")
    return p


@entry_point(PROG)
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    progress = not args.no_progress
    names = _check_backbones([b.strip() for b in args.backbones.split(",") if b.strip()], progress=progress)
    with cli.status("loading privlin (JAX)", enabled=progress):
        import privlin.sweep  # noqa: F401  (the first import of JAX takes seconds; every store's sweep needs it)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    all_rows, knn, spent = [], {}, []
    for bb in names:
        t = time.time()
        path = build_store(bb, args.out, progress=progress)
        t_feat = time.time() - t
        spent_before = earlier_entries(path, "train")
        run = run_store(path, bb, seeds=args.seeds, progress=progress)
        all_rows += run.rows
        knn[bb] = run.knn
        spent.append((bb, path, run, spent_before))
        if progress:
            print(f"[{bb}] done: features {t_feat:.1f} s, {run.fits} private fits + k-NN "
                  f"{time.time() - t - t_feat:.1f} s -> {path}", file=sys.stderr)
    summary = summarize(all_rows)
    csv_path = results.write_csv(summary, os.path.join(args.out, "quickstart.csv"))
    results.write_csv([{**{k: v for k, v in r.items() if k != "accuracy"}, "accuracy_pct": 100 * r["accuracy"]}
                       for r in all_rows], os.path.join(args.out, "quickstart_runs.csv"))
    lines = [spent_line(path, "train", run.epsilon, run.delta,
                        f"{run.fits} private fits composed, plus the non-private k-NN reference", progress=progress)
             for _, path, run, _ in spent]
    per_store = sorted({f"{run.epsilon:.4g}" for _, _, run, _ in spent})
    note = (f"Producing this figure cost ε = {' / '.join(per_store)} at δ = {DELTA:g} on each store's train split "
            f"({spent[0][2].fits} private fits composed); each point's ε is one model's. The k-NN lines are "
            f"non-private.")
    with cli.status(f"drawing {os.path.join(args.out, 'quickstart.png')}", enabled=progress):
        from experiments.plotting import plot_privacy_curves

        png = plot_privacy_curves(summary, os.path.join(args.out, "quickstart.png"),
                                  references={f"{b} k-NN (non-private)": 100 * a for b, a in knn.items()},
                                  title=f"digits: private linear probes (mean ± sd of {args.seeds} noise draws)",
                                  delta=DELTA, note=note)
    if args.docs:
        import shutil
        os.makedirs("docs", exist_ok=True)
        shutil.copyfile(png, os.path.join("docs", "quickstart.png"))
        shutil.copyfile(csv_path, os.path.join("docs", "quickstart.csv"))
    print(format_table(summary, knn))
    print(f"\nAccuracy in %, mean ± sd of {args.seeds} noise draws. δ = {DELTA:g}, zero-out neighbours (N public); "
          f"each ε is one model's guarantee.\nPrivacy spent (privlin's ledger home, the images of each store; both "
          f"stores hold the same images):")
    for line in lines:
        print("  " + line)
    if any(before for *_, before in spent):
        print("  (rerunning the quickstart charges its images again: the totals above include earlier runs)")
    print(f"wrote {csv_path} and {png} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
