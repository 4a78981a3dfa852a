"""``python -m stores info|verify|repair PATH``: inspect, check or repair a feature store.

Every problem is one line on stderr naming the split, shard and file, with a non-zero exit; no traceback.
"""
from __future__ import annotations

import argparse
import json
import sys

from . import CorruptStoreError, StoreError, open as open_store
from .repair import repair


def _info(path: str) -> int:
    st = open_store(path)
    print(f"store {path}")
    for key, value in st.attrs.items():
        print(f"  {key}: {json.dumps(value)}")
    for name in st.splits:
        try:
            sp = st[name]
            lay = sp.layout
            done = sp.done_mask()
        except StoreError as e:
            print(f"split {name}: {e}")
            continue
        print(f"split {name}: {lay.n_rows} rows x {lay.dim} {lay.dtype}, {len(sp) if done.all() else '?'} valid, "
              f"shards {int(done.sum())}/{lay.n_shards} done ({lay.shard_rows} rows each)")
        for key, value in sp.attrs.items():
            if key not in ("format", "n_rows", "dim", "dtype", "shard_rows", "chunk_rows", "skipped_ids"):
                print(f"  {key}: {json.dumps(value)}")
    return 0


def _verify(path: str) -> int:
    open_store(path).verify()
    print(f"ok: every shard done, every manifest, checksum and metadata seal matches ({path})")
    return 0


def _repair(path: str) -> int:
    for line in repair(path) or ["nothing to repair"]:
        print(line)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stores", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("command", choices=["info", "verify", "repair"],
                        help="info: provenance and progress; verify: read and check everything; repair: clear "
                             "damaged shards so the job redoes them (no writer may be running)")
    parser.add_argument("path", help="local path or fsspec URL of the store")
    args = parser.parse_args(argv)
    try:
        return {"info": _info, "verify": _verify, "repair": _repair}[args.command](args.path)
    except StoreError as e:
        damaged = isinstance(e, CorruptStoreError)
        hint = "; `python -m stores repair` clears it, then rerun the job" if damaged and args.command == "verify" \
            else ""
        label = ("CORRUPT" if damaged else "INCOMPLETE") if args.command == "verify" else "error"
        print(f"{label}: {_one_line(e)}{hint}", file=sys.stderr)
        return 1
    except (FileNotFoundError, OSError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


if __name__ == "__main__":
    sys.exit(main())
