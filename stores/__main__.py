"""``python -m stores info PATH`` and ``python -m stores verify PATH``."""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from . import CorruptStoreError, open as open_store


def _info(path: str) -> int:
    st = open_store(path)
    print(f"store {path}")
    for key, value in st.attrs.items():
        print(f"  {key}: {json.dumps(value)}")
    for name in st.splits:
        sp = st[name]
        lay = sp.layout
        done = np.asarray(sp._group["done"][:], dtype=bool)
        print(f"split {name}: {lay.n_rows} rows x {lay.dim} {lay.dtype}, {len(sp) if done.all() else '?'} valid, "
              f"shards {int(done.sum())}/{lay.n_shards} done ({lay.shard_rows} rows each)")
        for key, value in sp.attrs.items():
            if key not in ("format", "n_rows", "dim", "dtype", "shard_rows", "chunk_rows", "skipped_ids"):
                print(f"  {key}: {json.dumps(value)}")
    return 0


def _verify(path: str) -> int:
    try:
        open_store(path).verify()
    except CorruptStoreError as e:
        print(f"CORRUPT: {e}", file=sys.stderr)
        return 1
    print(f"ok: every shard done, every checksum matches ({path})")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stores", description="Inspect or verify a feature store.")
    parser.add_argument("command", choices=["info", "verify"])
    parser.add_argument("path", help="local path or fsspec URL of the store")
    args = parser.parse_args(argv)
    try:
        return {"info": _info, "verify": _verify}[args.command](args.path)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
