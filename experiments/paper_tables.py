"""Shared pieces of the reproduction scripts: finding a store, saying how to build it, printing ours beside theirs."""
from __future__ import annotations

import math
import os
import sys
from typing import Callable, Mapping, Sequence

__all__ = ["find_store", "build_hint", "eval_split_of", "open_checked", "comparison_table", "print_report",
           "add_common_arguments", "reproduce"]


def find_store(path: str | None, store_dir: str, backbone: str, head: str, dataset: str) -> str | None:
    """The store to use: ``path`` if given (it must exist), else featurize's default name under ``store_dir``
    (None if absent: the caller says how to build it)."""
    import cliconv as cli

    candidate = path or os.path.join(store_dir, f"{backbone}_{head}_{dataset}.zarr")
    if "://" in candidate or os.path.exists(candidate):
        return candidate
    if path:
        raise cli.UserError(f"--{dataset} {path}: no feature store there")
    return None


def build_hint(backbone: str, head: str, dataset: str, store_dir: str, *, note: str = "") -> str:
    """The command that builds the missing store (weights and data are never downloaded at run time)."""
    data = {"imagenet": "/path/to/imagenet (train/ and val/ class folders)",
            "cifar10": "/path/to/cifar-10-batches-py", "cifar100": "/path/to/cifar-100-python"}.get(dataset, "PATH")
    out = os.path.join(store_dir, f"{backbone}_{head}_{dataset}.zarr")
    text = (f"  no store for {dataset}: build it with\n"
            f"    featurize --backbone {backbone} --head {head} --dataset {dataset} --data-dir {data} --out {out}\n"
            f"  (weights: --weights FILE or $PRIVLIN_WEIGHTS_DIR; see `featurize --help`)")
    return text + (f"\n  note: {note}" if note else "")


def eval_split_of(store) -> str:
    """'test' if the store has it, else 'val'/'validation' (ImageNet); a store with neither is a user error."""
    import cliconv as cli

    for name in ("test", "val", "validation"):
        if name in store.splits:
            return name
    raise cli.UserError(f"{store.url} has no test/val split to evaluate on, only {list(store.splits)}")


def open_checked(path: str):
    """The store at ``path`` with a 'train' split and an evaluation split, checked before anything is charged."""
    import stores
    import cliconv as cli

    st = stores.open(path)
    if "train" not in st.splits:
        raise cli.UserError(f"{path} has no 'train' split to fit on, only {list(st.splits)}")
    return st, eval_split_of(st)


def comparison_table(rows: Sequence[Mapping]) -> str:
    """Markdown table: dataset, ε (paper), ε (our accountant), paper %, ours %."""
    lines = ["| dataset | ε (paper) | ε (our accountant) | δ | paper top-1 % | ours top-1 % |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        eps = "non-private" if r["epsilon"] is None or math.isinf(r["epsilon"]) else f"{r['epsilon']:g}"
        got = "-" if r.get("achieved") is None or math.isinf(r["achieved"]) else f"{r['achieved']:.3f}"
        paper = "-" if r.get("paper") is None else f"{r['paper']:.2f}"
        ours = "-" if r.get("ours") is None else f"{100 * r['ours']:.2f}"
        lines.append(f"| {r['dataset']} | {eps} | {got} | {r['delta']:g} | {paper} | {ours} |")
    return "\n".join(lines)


def print_report(rows: Sequence[Mapping], missing: Sequence[str], title: str, footnote: str,
                 spent: Sequence[str] = ()) -> int:
    """Print ours beside the paper's, what it cost, then how to build the stores that are missing.

    Returns the exit code: 2 if nothing ran (no store: the user must build one), else 0.
    """
    if rows:
        print(title + "\n")
        print(comparison_table(rows))
        print("\n" + footnote)
    if spent:
        print("privacy spent (privlin's ledger beside each store):\n" + "\n".join("  " + s for s in spent))
    if missing:
        print("\n".join(["", "Missing stores (nothing downloaded):", *missing]), file=sys.stderr if rows else sys.stdout)
    return 0 if rows else 2


def add_common_arguments(p) -> None:
    """--store-dir, --seed and --no-progress, shared by the reproduction scripts."""
    p.add_argument("--store-dir", default="features", help="where featurize's default store names are looked for")
    p.add_argument("--seed", type=int, default=None, help="noise seed (default: OS entropy)")
    p.add_argument("--no-progress", action="store_true")


def reproduce(datasets: Sequence[tuple[str, str, str, str]], args, run_one: Callable[[str, str], tuple[list, str]],
              title: str, footnote: str) -> int:
    """Run ``run_one(path, dataset) -> (rows, spent line)`` on every store found; print the report.

    ``datasets``: ``(dataset, backbone, head, note)``; a store named on the command line must exist, a default one
    that is missing gets the command that builds it.  Returns the exit code (:func:`print_report`).
    """
    rows, missing, spent = [], [], []
    for ds, bb, head, note in datasets:
        path = find_store(getattr(args, ds), args.store_dir, bb, head, ds)
        if path is None:
            missing.append(build_hint(bb, head, ds, args.store_dir, note=note))
            continue
        got, cost = run_one(path, ds)
        rows += got
        spent.append(cost)
    return print_report(rows, missing, title, footnote, spent)
