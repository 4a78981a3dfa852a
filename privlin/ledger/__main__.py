"""``python -m privlin.ledger PATH [--split S] [--delta D] [--json] [--set-cap EPS DELTA [--note TEXT]]``: a split's
privacy history, total and cap; set or raise the cap.

PATH is a store (every split with a ledger), a store split, or a ``privacy_ledger.json`` file.  Every number
printed is the ledger's own (:meth:`PrivacyLedger.summary`, :meth:`PrivacyLedger.spent`).  ``--set-cap`` sets the
cap of one split's ledger (:meth:`PrivacyLedger.set_cap`, which moves the split's anchor); raising a stored cap
needs ``--note`` saying why, recorded with it.
"""
from __future__ import annotations

import json
import sys
from typing import Sequence

import cliconv as cli
from stores.errors import StoreError

from . import LEDGER_FILENAME  # the ledger itself (dp-accounting: seconds) is imported after the arguments parse

PROG = "python -m privlin.ledger"


def _resolve(path: str, split: str | None) -> list[str]:
    """Ledger files meant by PATH: a ledger file, a split, or a store (every split); a wrong name is an error."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(path)
    root = root.rstrip("/")
    if path.endswith(".json"):
        if not fs.isfile(root):
            raise cli.UserError(f"no privacy ledger at {path}", code=1)
        return [path]
    if not fs.exists(root):
        raise cli.UserError(f"no store, split or privacy ledger at {path}", code=1)
    if split:
        if not fs.isdir(root + "/" + split):
            raise cli.UserError(f"no split {split!r} in {path}; its splits: {_children(fs, root)}")
        return [_ledger_path(path, split)]  # a split with nothing charged yet: its (empty) history
    if fs.exists(root + "/" + LEDGER_FILENAME):
        return [path.rstrip("/") + "/" + LEDGER_FILENAME]
    found = [_ledger_path(path, name) for name in _children(fs, root)
             if fs.exists(root + "/" + name + "/" + LEDGER_FILENAME)]
    if not found:
        raise cli.UserError(f"no privacy ledger under {path} (nothing has been charged to its splits)", code=1)
    return found


def _resolve_for_cap(path: str, split: str | None) -> list[str]:
    """The one ledger file a cap is set on: a ledger file, a split, or a store with ``--split`` (it may not exist yet)."""
    if path.endswith(".json") or split:
        return [path] if path.endswith(".json") else _resolve(path, split)
    found = _resolve(path, None)
    if len(found) > 1:
        raise cli.UserError(f"{path} holds {len(found)} split ledgers: name the split whose cap to set (--split)")
    return found


def _ledger_path(path: str, split: str) -> str:
    from . import ledger_path

    return ledger_path(path, split)


def _open(f: str):
    """The ledger file ``f`` (a :class:`PrivacyLedger`), through its split's anchor when it lies beside a split."""
    from . import PrivacyLedger

    folder = f.rstrip("/").rsplit("/", 1)[0]
    store, split = folder.rsplit("/", 1) if "/" in folder else (".", folder)
    if f.endswith("/" + LEDGER_FILENAME) and split not in ("", ".", ".."):
        import fsspec

        fs, root = fsspec.core.url_to_fs(store or "/")
        in_store = fs.exists(root.rstrip("/") + "/zarr.json")  # beside a store: its split must anchor it
        return PrivacyLedger.for_split(store or "/", split, anchored=True if in_store else None)
    return PrivacyLedger(f)


def _children(fs, root: str) -> list[str]:
    """Names of the folders in ``root`` (a store's splits)."""
    return sorted(c.rstrip("/").rsplit("/", 1)[-1] for c in fs.ls(root, detail=False) if fs.isdir(c))


def build_parser():
    p = cli.parser(PROG, __doc__)
    p.add_argument("path", help="a store, a store split, or a privacy_ledger.json file (local path or fsspec URL)")
    p.add_argument("--split", default=None, help="split name when PATH is a store (default: every split)")
    p.add_argument("--delta", type=cli.Interval(float, 0, 1, closed="neither"), default=None,
                   help="δ for the total (default: the cap's δ, else the smallest δ of the entries)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--set-cap", nargs=2, type=float, metavar=("EPSILON", "DELTA"), default=None,
                   help="set the cap of one split's ledger to (EPSILON >= 0, 0 < DELTA < 1), then show the ledger")
    p.add_argument("--note", default=None, help="why the cap changes, recorded with it (needed to raise a cap)")
    p.add_argument("--no-progress", action="store_true", help="no progress line while composing")
    return p


@cli.entry_point(PROG, (OSError, ValueError, StoreError))  # StoreError: the split that anchors the ledger is damaged
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .entry import json_float

    files = _resolve_for_cap(args.path, args.split) if args.set_cap else _resolve(args.path, args.split)
    if args.set_cap:
        _open(files[0]).set_cap(*args.set_cap, note=args.note or "")
    out = []
    for f in files:
        led = _open(f)
        with cli.status(f"composing the {len(led)} entries of {f} (PLD)", enabled=not args.no_progress):
            if args.json:
                eps, delta = led.spent(args.delta)
                out.append({"path": f, "epsilon": json_float(eps), "delta": delta, **led.to_dict()})
            else:
                text = led.summary(args.delta)
        if not args.json:
            print(text)
    if args.json:
        print(json.dumps(out if len(out) > 1 else out[0], indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
