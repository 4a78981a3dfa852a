"""``python -m privlin.ledger PATH [--split S] [--delta D] [--json]``: a split's privacy history and total."""
from __future__ import annotations

import json
import sys
from typing import Sequence

from . import LEDGER_FILENAME, PrivacyLedger, ledger_path
from .entry import json_float


def _resolve(path: str, split: str | None) -> list[str]:
    """Ledger files meant by PATH: a ledger file, a split, or a store (every split)."""
    if path.endswith(".json"):
        return [path]
    if split:
        return [ledger_path(path, split)]
    import fsspec

    fs, root = fsspec.core.url_to_fs(path)
    if fs.exists(root.rstrip("/") + "/" + LEDGER_FILENAME):
        return [path.rstrip("/") + "/" + LEDGER_FILENAME]
    found = []
    if fs.isdir(root):
        for child in sorted(fs.ls(root, detail=False)):
            name = child.rstrip("/").rsplit("/", 1)[-1]
            if fs.exists(child.rstrip("/") + "/" + LEDGER_FILENAME):
                found.append(ledger_path(path, name))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m privlin.ledger", description="Print a split's privacy history and total.")
    p.add_argument("path", help="a store, a store split, or a privacy_ledger.json file (local path or fsspec URL)")
    p.add_argument("--split", default=None, help="split name when PATH is a store")
    p.add_argument("--delta", type=float, default=None, help="δ for the total (default: the cap's δ, else the sum "
                                                              "of the entries' δ)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = p.parse_args(argv)
    files = _resolve(args.path, args.split)
    if not files:
        print(f"no privacy ledger under {args.path}")
        return 1
    out = []
    for f in files:
        led = PrivacyLedger(f)
        if args.json:
            eps, delta = led.spent(args.delta)
            out.append({"path": f, "epsilon": json_float(eps), "delta": delta, **led.to_dict()})
        else:
            print(led.summary(args.delta))
    if args.json:
        print(json.dumps(out if len(out) > 1 else out[0], indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
