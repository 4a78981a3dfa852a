"""``python -m stores info|verify|repair PATH``: inspect, check or repair a feature store.

Every problem is one line on stderr naming the split, shard and file, with a non-zero exit; no traceback.
"""
from __future__ import annotations

import json
import sys

import cliconv as cli

from .errors import CorruptStoreError, IncompleteStoreError, NotAStoreError, StoreError


def open_store(path):
    from .reader import open

    return open(path)


WIDTH = 120


def _show(key: str, value, indent: int = 2) -> list[str]:
    """``key: value`` as lines of at most :data:`WIDTH` characters: a dict too long for one line one key a line
    (nested), a long list or text shortened with its length stated (``--json`` prints everything)."""
    pad = " " * indent
    text = json.dumps(value, ensure_ascii=False)
    if len(pad) + len(key) + 2 + len(text) <= WIDTH:
        return [f"{pad}{key}: {text}"]
    if isinstance(value, dict) and value:
        return [f"{pad}{key}:"] + [line for k, v in value.items() for line in _show(str(k), v, indent + 2)]
    room = max(20, WIDTH - len(pad) - len(key) - 2)
    what = f"{len(value)} items" if isinstance(value, (list, dict)) else f"{len(text)} characters"
    note = f" ... ({what})"
    return [f"{pad}{key}: {text[:room - len(note)]}{note}"]


def _info(path: str, as_json: bool = False) -> int:
    st = open_store(path)
    doc = {"store": path, "attrs": st.attrs, "splits": {}}
    lines = [f"store {path}"] + [line for key, value in st.attrs.items() for line in _show(key, value)]
    for name in st.splits:
        try:
            sp = st[name]
            lay = sp.layout
            done = sp.done_mask()
        except StoreError as e:
            doc["splits"][name] = {"error": cli.one_line(e)}
            lines.append(f"split {name}: {cli.one_line(e)}")
            continue
        valid = len(sp) if done.all() else None
        attrs = {k: v for k, v in sp.attrs.items()
                 if k not in ("format", "n_rows", "dim", "dtype", "shard_rows", "chunk_rows", "skipped_ids")}
        doc["splits"][name] = {"rows": lay.n_rows, "dim": lay.dim, "dtype": lay.dtype, "valid": valid,
                               "shards_done": int(done.sum()), "shards": lay.n_shards, "shard_rows": lay.shard_rows,
                               "attrs": attrs}
        lines.append(f"split {name}: {lay.n_rows} rows x {lay.dim} {lay.dtype}, {'?' if valid is None else valid} "
                     f"valid, shards {int(done.sum())}/{lay.n_shards} done ({lay.shard_rows} rows each)")
        lines += [line for key, value in attrs.items() for line in _show(key, value)]
    print(json.dumps(doc, indent=1, ensure_ascii=False) if as_json else "\n".join(lines))
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
    p.add_argument("--json", action="store_true", help="info: everything as one JSON document (default: lines of at "
                                                       f"most {WIDTH} characters, long values shortened)")
    return p


@cli.entry_point(PROG, (OSError,))
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "info":
            return _info(args.path, args.json)
        return {"verify": _verify, "repair": _repair}[args.command](args.path)
    except NotAStoreError as e:  # a file where a store was named: a usage mistake, as a path that is not there
        raise cli.UserError(str(e)) from None
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
