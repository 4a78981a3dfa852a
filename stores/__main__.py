"""``python -m stores info|verify|repair PATH``: inspect, check or repair a feature store.

Every problem is one line on stderr naming the split, shard and file, with a non-zero exit; no traceback.
"""
from __future__ import annotations

import json
import sys

import cliconv as cli

from .errors import CorruptStoreError, IncompleteStoreError, StoreError


def open_store(path):
    from .reader import open

    return open(path)


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
    notes: list[str] = []
    with cli.status(f"verifying every shard of {path}"):
        found = open_store(path).damage(notes)
    if found:
        from .reader import summarize

        raise summarize(found)
    print(f"ok: every shard done, every manifest, checksum and metadata seal matches ({path})")
    for note in notes:
        print(f"note: {note}")
    return 0


def _repair(path: str) -> int:
    from .repair import repair

    for line in repair(path) or ["nothing to repair"]:
        print(line)
    return 0


PROG = "python -m stores"


def build_parser():
    p = cli.parser(PROG, __doc__)
    p.add_argument("command", choices=["info", "verify", "repair"],
                   help="info: provenance and progress; verify: read and check everything; repair: clear "
                        "damaged shards so the job redoes them (no writer may be running)")
    p.add_argument("path", help="local path or fsspec URL of the store")
    return p


@cli.entry_point(PROG, (OSError,))
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"info": _info, "verify": _verify, "repair": _repair}[args.command](args.path)
    except StoreError as e:  # the store is damaged or unfinished: the command worked and found it (exit 1)
        damaged = isinstance(e, CorruptStoreError)
        hint = "; `python -m stores repair` clears it, then rerun the job" if damaged and args.command == "verify" \
            else ""
        label = f"{PROG}: error"
        if args.command == "verify" and isinstance(e, (CorruptStoreError, IncompleteStoreError)):
            label = "CORRUPT" if damaged else "INCOMPLETE"
        print(f"{label}: {cli.one_line(e)}{hint}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
