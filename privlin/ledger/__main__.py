"""``python -m privlin.ledger PATH [--split S] [--delta D] [--json]``: a split's privacy history and total.

PATH is a store (every split with a ledger), a store split, or a ``privacy_ledger.json`` file.  Every number
printed is the ledger's own (:meth:`PrivacyLedger.summary`, :meth:`PrivacyLedger.spent`).
"""
from __future__ import annotations

import json
import sys
from typing import Sequence

from stores import cli

from . import LEDGER_FILENAME, PrivacyLedger, ledger_path
from .entry import json_float

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
        return [ledger_path(path, split)]  # a split with nothing charged yet: its (empty) history
    if fs.exists(root + "/" + LEDGER_FILENAME):
        return [path.rstrip("/") + "/" + LEDGER_FILENAME]
    found = [ledger_path(path, name) for name in _children(fs, root)
             if fs.exists(root + "/" + name + "/" + LEDGER_FILENAME)]
    if not found:
        raise cli.UserError(f"no privacy ledger under {path} (nothing has been charged to its splits)", code=1)
    return found


def _children(fs, root: str) -> list[str]:
    """Names of the folders in ``root`` (a store's splits)."""
    return sorted(c.rstrip("/").rsplit("/", 1)[-1] for c in fs.ls(root, detail=False) if fs.isdir(c))


def build_parser():
    p = cli.parser(PROG, __doc__)
    p.add_argument("path", help="a store, a store split, or a privacy_ledger.json file (local path or fsspec URL)")
    p.add_argument("--split", default=None, help="split name when PATH is a store (default: every split)")
    p.add_argument("--delta", type=cli.Interval(float, 0, 1, closed="neither"), default=None,
                   help="δ for the total (default: the cap's δ, else the sum of the entries' δ)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--no-progress", action="store_true", help="no progress line while composing")
    return p


@cli.entry_point(PROG, (OSError, ValueError))
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = []
    for f in _resolve(args.path, args.split):
        led = PrivacyLedger(f)
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
