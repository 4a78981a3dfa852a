"""Privacy–accuracy curve of any feature store: every (method, ε, lr, steps) in shared passes, table + CSV + PNG.

::

    python -m experiments.eps_sweep features/vip_base_cls_cifar10.zarr --eps 0.5 1 2 4 8 --method adam1 sgd
    python -m experiments.eps_sweep STORE --method sgd --lr 1 5 --val-split val --select-eps 0.5

Each row's ε is the guarantee of that one model.  Picking the best row by its test accuracy is not private; with
``--val-split`` the best setting is chosen privately on that split (report-noisy-max, ``--select-eps``) and only
the chosen model's test accuracy is reported as the private result.
"""
from __future__ import annotations

import argparse
import math
import os
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.eps_sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("store", help="store path or fsspec URL")
    p.add_argument("--eps", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0, 8.0])
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--method", nargs="+", default=["adam1"], choices=["adam1", "sgd"])
    p.add_argument("--lr", type=float, nargs="+", default=None, help="learning rates (default: privlin's rule)")
    p.add_argument("--steps", type=int, nargs="+", default=[100], help="sgd steps")
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--no-normalize", dest="normalize", action="store_false", help="do not scale rows to norm clip")
    p.add_argument("--center-share", type=float, default=0.0, help="share of the budget for private centering")
    p.add_argument("--split", default="train")
    p.add_argument("--eval-split", default="test")
    p.add_argument("--val-split", default=None, help="held-out private split for private selection")
    p.add_argument("--select-eps", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=None, help="noise seed (default: OS entropy)")
    p.add_argument("--out", default=None, help="folder for sweep.csv and sweep.png (default: print only)")
    args = p.parse_args(argv)

    import stores
    from privlin.selection import select_private
    from privlin.sweep import sweep

    st = stores.open(args.store)
    todo = []
    for m in args.method:
        for e in args.eps:
            for lr in (args.lr or [None]):
                for t in (args.steps if m == "sgd" else [None]):
                    todo.append(dict(method=m, epsilon=e, delta=args.delta, learning_rate=lr, steps=t,
                                     clip=args.clip, normalize=args.normalize, center=args.center_share > 0,
                                     **({"center_share": args.center_share} if args.center_share > 0 else {})))
    res = sweep(st, settings=todo, split=args.split, eval_split=args.eval_split, random_state=args.seed,
                progress=True)
    print(res.table())
    if args.val_split:
        sel = select_private(res, st[args.val_split], epsilon=args.select_eps, delta=args.delta,
                             split=args.val_split, random_state=args.seed)
        r = sel.record
        print(f"\nprivately selected on '{args.val_split}' (ε_select={args.select_eps:g}): {r['method']} ε={r['epsilon']:g}"
              f" lr={r['learning_rate']:.3g} steps={r['steps']} -> {args.eval_split} accuracy "
              f"{100 * r['accuracy']:.2f}%; training rows pay ε={res.total_epsilon:.3f} (all settings), "
              f"validation rows ε={args.select_eps:g}")
    else:
        print("\n(best-of-table numbers are tuned on the evaluation split: not private; use --val-split)")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        res.to_csv(os.path.join(args.out, "sweep.csv"), extra={"store": args.store})
        from experiments.plotting import plot_privacy_curves

        rows = [{**r, "label": f"{r['method']} lr={r['learning_rate']:.3g}" + (f" T={r['steps']}" if r["method"] == "sgd"
                                                                               else "")}
                for r in res.records if r["epsilon"] is not None and math.isfinite(r["epsilon"])]
        png = plot_privacy_curves(rows, os.path.join(args.out, "sweep.png"), delta=args.delta,
                                  title=f"{st.attrs.get('backbone', '?')} on {st.attrs.get('dataset', '?')}")
        print(f"wrote {args.out}/sweep.csv and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
