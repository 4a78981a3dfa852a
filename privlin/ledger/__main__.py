"""``python -m privlin.ledger PATH [--split S] [--delta D] [--json] [--set-cap EPS DELTA [--note TEXT]]``: what the
items of a store's splits have spent, by item group, from the ledger home; set or raise their cap.

PATH is a store (every split), a store split, or a legacy ``privacy_ledger.json`` file.  The home is
``$PRIVLIN_LEDGER_HOME`` (default: the user's data directory; see :mod:`privlin.ledger.home`).  Every number printed
is the ledger's own (:meth:`ItemLedger.summary`, :meth:`ItemLedger.spent`): one short line per entry, each group
of items that spent alike, and the worst item's total.  ``--set-cap`` sets the cap of one split's items
(:meth:`ItemLedger.set_cap`); raising a stored cap needs ``--note`` saying why, recorded with it.
"""
from __future__ import annotations

import json
import sys
from typing import Sequence

import cliconv as cli
from stores.errors import StoreError

PROG = "python -m privlin.ledger"


def _resolve(path: str, split: str | None) -> list[tuple[str, str | None]]:
    """(store, split) pairs meant by PATH, or [(ledger file, None)]; a wrong name is one line."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(path)
    root = root.rstrip("/")
    if fs.isfile(root):
        if path.endswith(".json"):
            return [(path, None)]
        raise cli.UserError(f"{path!r} is a file, not a feature store (a folder) or a privacy ledger")
    if not fs.exists(root):
        raise cli.UserError(f"no store, split or privacy ledger at {path}")
    store, name = _parent(path)
    if store is None and fs.exists(root + "/zarr.json") and _is_store(path):
        store, name = path, split
    if store is None:
        raise cli.UserError(f"no feature store at {path}")
    import stores

    from ..spelling import check_split

    opened = stores.open(store)
    if name is not None:
        check_split(opened, name)
    return [(store, n) for n in ([name] if name else opened.splits)]


def _is_store(path: str) -> bool:
    import stores

    try:
        stores.open(path)
        return True
    except (FileNotFoundError, StoreError):
        return False


def _parent(path: str) -> tuple[str | None, str | None]:
    """A split folder: (its store, its name); else (None, None)."""
    import stores

    store, _, name = path.rstrip("/").rpartition("/")
    return (store, name) if store and _is_store(store) and name in stores.open(store).splits else (None, None)


def _open(target: tuple[str, str | None]):
    from . import PrivacyLedger

    where, split = target
    return PrivacyLedger(where) if split is None else PrivacyLedger.for_split(where, split)


def build_parser():
    p = cli.parser(PROG, __doc__)
    p.add_argument("path", help="a store, a store split, or a legacy privacy_ledger.json file (path or fsspec URL)")
    p.add_argument("--split", default=None, help="split name when PATH is a store (default: every split)")
    p.add_argument("--delta", type=cli.Interval(float, 0, 1, closed="neither"), default=None,
                   help="δ for the total (default: the cap's δ, else the smallest δ of the entries)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--set-cap", nargs=2, type=float, metavar=("EPSILON", "DELTA"), default=None,
                   help="set the cap of one split's items to (EPSILON >= 0, 0 < DELTA < 1), then show the ledger")
    p.add_argument("--note", default=None, help="why the cap changes, recorded with it (needed to raise a cap)")
    p.add_argument("--no-progress", action="store_true", help="no progress line while composing")
    return p


@cli.entry_point(PROG, (OSError, ValueError, StoreError))  # StoreError: the split that anchors the ledger is damaged
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .entry import json_float

    targets = _resolve(args.path, args.split)
    if args.set_cap:
        if len(targets) > 1:
            raise cli.UserError(f"{args.path} holds {len(targets)} splits: name the split whose cap to set (--split)")
        _open(targets[0]).set_cap(*args.set_cap, note=args.note or "")
    out = []
    for t in targets:
        led = _open(t)
        with cli.status(f"composing the entries of {led.where}", enabled=not args.no_progress):
            if args.json:
                eps, delta = led.spent(args.delta)
                out.append({"store": t[0], "split": t[1], "epsilon": json_float(eps), "delta": delta,
                            **led.to_dict()})
            else:
                text = led.summary(args.delta)
        if not args.json:
            print(text)
    if args.json:
        print(json.dumps(out if len(out) > 1 else out[0], separators=(",", ":")))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
