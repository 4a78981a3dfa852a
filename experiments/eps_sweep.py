"""Privacy–accuracy curve of any feature store: every (method, ε, lr, steps) in shared passes, table + CSV + PNG.

::

    python -m experiments.eps_sweep features/vip_base_cls_cifar10.zarr --eps 0.5 1 2 4 8 --method adam1 sgd
    python -m experiments.eps_sweep STORE --method sgd --lr 1 5 --val-split val --select-eps 0.5 --draws 3

Each row's ε is the guarantee of that one model; the sweep's total (every setting and draw, composed) is what
the training split is charged, and the split's ledger total is printed after it.  Picking the best row by its
test accuracy is not private; with ``--val-split`` the best setting is chosen privately on that split
(report-noisy-max, ``--select-eps``) and only the chosen model's test accuracy is reported as the private result.

The printed table has one row per setting: accuracy as mean ± sd over its ``--draws`` noise draws, in %.  Every
stage that runs longer than a few seconds (loading JAX, opening the store, the sweep, composing the ledger, the
selection, the plot) says so on stderr; ``--no-progress`` silences that.  Arguments are parsed before privlin or
JAX is imported, so ``--help`` answers at once.
"""
from __future__ import annotations

import math
import os
import sys

import cliconv as cli

from experiments import entry_point, results
from experiments.spent import earlier_entries, spent_line

PROG = "python -m experiments.eps_sweep"
POSITIVE = cli.Interval(float, 0, None, closed="neither")


def build_parser():
    p = cli.parser(PROG, __doc__)
    p.add_argument("store", help="store path or fsspec URL")
    p.add_argument("--eps", type=cli.Interval(float, 0, math.inf, closed="right"), nargs="+",
                   default=[0.5, 1.0, 2.0, 4.0, 8.0], help="target ε of each model (inf: the non-private baseline)")
    p.add_argument("--delta", type=cli.Interval(float, 0, 1, closed="neither"), default=1e-5)
    p.add_argument("--method", nargs="+", default=["adam1"], choices=["adam1", "sgd"])
    p.add_argument("--lr", type=POSITIVE, nargs="+", default=None, help="learning rates (default: privlin's rule)")
    p.add_argument("--steps", type=cli.Interval(int, 1), nargs="+", default=[100], help="sgd steps")
    p.add_argument("--clip", type=POSITIVE, default=1.0)
    p.add_argument("--no-normalize", dest="normalize", action="store_false", help="do not scale rows to norm clip")
    p.add_argument("--center-share", type=cli.Interval(float, 0, 1, closed="left"), default=None,
                   help="share of the budget μ² for private centering (default: privlin's plan, 5%%; 0: no "
                        "centering, and so no scaling stage)")
    p.add_argument("--draws", type=cli.Interval(int, 1), default=1,
                   help="noise draws per setting (each is a fit, charged; >1 draws error bars)")
    p.add_argument("--split", default="train", help="private training split")
    p.add_argument("--public", default=None, metavar="SPLIT_OR_STORE",
                   help="rows you may publish: a split of the store or another store's path; the plan's "
                        "preprocessing statistics come from them, free, and the budget trains (privlin.public)")
    p.add_argument("--eval-split", default="test")
    p.add_argument("--val-split", default=None, help="held-out private split for private selection")
    p.add_argument("--select-eps", type=POSITIVE, default=0.5, help="ε of the private selection")
    p.add_argument("--seed", type=int, default=None, help="noise seed (default: OS entropy)")
    p.add_argument("--out", type=cli.output_folder, default=None,
                   help="folder for sweep.csv and sweep.png (default: print only)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines or bars on stderr")
    return p


def settings(args) -> list[dict]:
    """The estimator parameters of every setting the command line asks for (one draw each)."""
    todo = []
    for m in args.method:
        for e in args.eps:
            for lr in (args.lr or [None]):
                for t in (args.steps if m == "sgd" else [None]):
                    todo.append(dict(method=m, epsilon=e, delta=args.delta, learning_rate=lr, steps=t,
                                     clip=args.clip, normalize=args.normalize, **_centering(args)))
    return todo


def _centering(args) -> dict:
    """Only what the command line changes: with neither flag, the plan decides, as ``privlin.sweep`` does."""
    if args.center_share is None:
        return {}
    return {"center": False} if args.center_share == 0 else {"center_share": args.center_share}


def line_label(record: dict, args) -> str:
    """The curve a record belongs to: its method, plus lr / steps only when the command line varies them."""
    label = record["method"]
    if args.lr and len(args.lr) > 1:
        label += f" lr={record['learning_rate']:.3g}"
    if record["method"] == "sgd" and len(args.steps) > 1:
        label += f" T={record['steps']}"
    return label


def _check_store(path: str) -> None:
    """A local store path that names no folder is reported before JAX loads (a typo costs no seconds); a URL is
    checked when it is opened."""
    local = path[len("file://"):] if path.startswith("file://") else path
    if "://" not in local and not os.path.isdir(local):
        raise cli.UserError(f"no feature store at {path!r}")


def _check_splits(st, args) -> None:
    """Every split named exists and the validation split is not the training split: before anything is charged."""
    named = {"--split": args.split, "--eval-split": args.eval_split, "--val-split": args.val_split}
    for flag, name in named.items():
        if name is not None and name not in st.splits:
            raise cli.UserError(f"{flag} {name!r}: no such split in {args.store}; its splits: {st.splits}")
    if args.public is not None and args.public in (args.split, args.eval_split, args.val_split):
        raise cli.UserError(f"--public {args.public!r} must be rows you may publish: not a split the sweep trains, "
                            "evaluates or selects on")
    if args.val_split is not None and args.val_split in (args.split, args.eval_split):
        raise cli.UserError(f"--val-split {args.val_split!r} must be held out: not the training or evaluation split")


@entry_point(PROG)
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    _check_store(args.store)
    progress = not args.no_progress
    with cli.status(f"opening {args.store}", enabled=progress):  # zarr, not JAX: a wrong split is told at once
        import stores

        st = stores.open(args.store)
        _check_splits(st, args)
    with cli.status("loading privlin (JAX)", enabled=progress):
        from privlin.selection import select_private
        from privlin.sweep import sweep
    todo = settings(args)
    earlier_entries(args.store, args.split)
    n_fits = len(todo) * args.draws
    with cli.status(f"sweeping {n_fits} private fits on [{args.split}]", enabled=progress):
        res = sweep(st, settings=todo * args.draws, split=args.split, eval_split=args.eval_split,
                    random_state=args.seed, progress=progress, **({"public": args.public} if args.public else {}))
    print(format_table(summarize(res.records, args), res.total_epsilon, res.total_delta, len(todo), args.draws))
    spent = [spent_line(args.store, args.split, res.total_epsilon, res.total_delta,
                        f"{n_fits} private fits composed", progress=progress)]
    if args.val_split:
        with cli.status(f"private selection on [{args.val_split}]", enabled=progress):
            sel = select_private(res, st[args.val_split], epsilon=args.select_eps, delta=args.delta,
                                 split=args.val_split, random_state=args.seed)
        r = sel.record
        print(f"\nprivately selected on '{args.val_split}' (ε_select={sel.epsilon:g}): {r['method']} "
              f"ε={r['epsilon']:g} lr={r['learning_rate']:.3g} steps={r['steps']} -> {args.eval_split} accuracy "
              f"{100 * r['accuracy']:.2f}%; training rows pay ε={sel.training_epsilon:.3f} (all settings), "
              f"validation rows ε={sel.epsilon:g}")
        spent.append(spent_line(args.store, args.val_split, sel.epsilon, sel.delta, "private selection",
                                progress=progress))
    else:
        print("\n(best-of-table numbers are tuned on the evaluation split: not private; use --val-split)")
    print("privacy spent:\n" + "\n".join("  " + s for s in spent))
    if args.out:
        with cli.status(f"writing {os.path.join(args.out, 'sweep.csv')} and sweep.png", enabled=progress):
            paths = _write(args, st, res)
        print(f"wrote {paths[0]} and {paths[1]}")
    return 0


#: What the table and the CSV keep of each setting (the same in all of its draws, but the learning rate: see
#: :func:`summarize`).
KEEP = ("achieved_epsilon", "delta", "noise_multiplier", "learning_rate", "steps", "clip", "center_share")


def summarize(records: list[dict], args) -> list[dict]:
    """One row per setting: accuracy (%) mean ± sd over its noise draws (:func:`experiments.results.summarize`).

    Where the plan releases the curvature, each draw's learning rate follows its own release: ``lr_min`` and
    ``lr_max`` give their range (``learning_rate`` is the first draw's).
    """
    rows = [{**r, "label": line_label(r, args)} for r in records]
    summary = results.summarize(rows, by=("label", "method", "epsilon"), keep=KEEP)
    for s in summary:
        lrs = [r["learning_rate"] for r in rows
               if (r["label"], r["method"], r["epsilon"]) == (s["label"], s["method"], s["epsilon"])]
        s["lr_min"], s["lr_max"] = min(lrs), max(lrs)
    return summary


def format_table(summary: list[dict], total_epsilon: float, total_delta: float, n_settings: int,
                 draws: int) -> str:
    """Plain-text table, one row per setting, and what releasing every fit costs (the sweep's composition)."""
    head = (f"{'setting':16} {'eps':>6} {'eps got':>8} {'sigma':>9} {'lr':>15} {'steps':>5} {'clip':>5} "
            f"{'accuracy %':>14} {'draws':>5}")
    lines = [head, "-" * len(head)]
    for s in summary:
        eps = "inf" if math.isinf(s["epsilon"]) else f"{s['epsilon']:g}"
        got = "inf" if math.isinf(s["achieved_epsilon"]) else f"{s['achieved_epsilon']:.3f}"
        lr = (f"{s['lr_min']:.2g}" if s["lr_min"] == s["lr_max"] else f"{s['lr_min']:.2g}–{s['lr_max']:.2g}")
        acc = f"{s['accuracy_pct']:.2f}" + ("" if s["sd_pct"] is None else f" ± {s['sd_pct']:.2f}")
        lines.append(f"{s['label']:16} {eps:>6} {got:>8} {s['noise_multiplier']:>9.4g} {lr:>15} {s['steps']:>5} "
                     f"{s['clip']:>5.3g} {acc:>14} {s['draws']:>5}")
    fits = n_settings * draws
    per = f" ({n_settings} setting{'s' * (n_settings != 1)} × {draws} draws)" if draws > 1 else ""
    lines.append(f"accuracy: mean ± sd over each setting's noise draws. Releasing all {fits} fits{per}: "
                 f"ε = {total_epsilon:.3f} at δ = {total_delta:g} (composition)")
    return "\n".join(lines)


def _write(args, st, res) -> tuple[str, str]:
    """sweep.csv (the table's rows: mean ± sd over draws, accuracy in %) and sweep.png (one curve per method)."""
    from experiments.plotting import plot_privacy_curves

    os.makedirs(args.out, exist_ok=True)
    summary = summarize(res.records, args)
    rows = [{"store": args.store, **{k: v for k, v in s.items() if k not in ("lr_min", "lr_max")}} for s in summary]
    csv_path = results.write_csv(rows, os.path.join(args.out, "sweep.csv"))
    finite = [s for s in summary if math.isfinite(s["epsilon"])]
    draws = f" (mean ± sd of {args.draws} noise draws)" if args.draws > 1 else ""
    note = (f"Producing this figure cost ε = {res.total_epsilon:.4g} at δ = {res.total_delta:g} on [{args.split}] "
            f"({len(res.records)} fits composed); each point's ε is one model's.")
    png = plot_privacy_curves(finite, os.path.join(args.out, "sweep.png"), delta=args.delta, note=note,
                              title=f"{st.attrs.get('backbone', '?')} on {st.attrs.get('dataset', '?')}{draws}")
    return csv_path, png


if __name__ == "__main__":
    sys.exit(main())
