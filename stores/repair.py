"""``python -m stores repair PATH``: clear what damage made unusable, so the extraction job redoes it.

Repair never invents data. With no writer running, it

1. removes temporary files of interrupted writes (``*.partial``);
2. restores a split's missing or damaged ``zarr.json`` from its sealed copy in the consolidated metadata, then
   drops that copy (written again once every split is sound, never without a split it held);
3. rewrites array metadata that differs from its split's layout (it is a function of the sealed layout);
4. clears every damaged shard: its done mark, manifest, claim and chunk files, and marks the split incomplete,
   so rerunning the same ``featurize`` command computes exactly those shards again.

Damaged attributes of the store or of a split (provenance and layout, which only the writing job knows) cannot
be repaired: they are reported, and the store must be extracted again.
"""
from __future__ import annotations

import json

import zarr

from . import location, manifest, seal
from .errors import CorruptStoreError, IncompleteStoreError
from .layout import SplitLayout, arrays_of, canonical, chunk_key, done_key, expected_documents, row_arrays_of
from .reader import Split, quiet, split_arrays
from .writer import consolidate, read_doc


def repair(url) -> list[str]:
    """Repair the store at ``url`` in place; returns what was done, one line each.

    Raises
    ------
    CorruptStoreError
        Damage repair cannot undo (the store's or a split's attributes), naming the file.
    """
    store = location.make_store(url, read_only=False)
    if read_doc(store, "zarr.json") is None:
        raise FileNotFoundError(f"no feature store at {location.describe(url)}")
    actions = [f"removed {len(removed)} temporary file(s) of interrupted writes"
               for removed in [location.remove_partials(store)] if removed]
    root_doc = read_doc(store, "zarr.json")
    seal.check(root_doc.get("attributes", {}),
               f"store {location.describe(url)} (zarr.json): cannot be repaired, extract again")
    copies = (root_doc.get("consolidated_metadata") or {}).get("metadata") or {}
    names = [n for n in location.list_dir(store, "") if location.get_bytes(store, f"{n}/zarr.json") is not None]
    names = sorted(set(names) | {k for k in copies if "/" not in k})
    docs = {}
    for name in names:  # restore split documents before the copy they are restored from is dropped
        docs[name], restored = _split_doc(store, name, copies.get(name))
        actions += restored
    if root_doc.get("consolidated_metadata") is not None:
        root_doc.pop("consolidated_metadata")
        location.put_bytes(store, "zarr.json", json.dumps(root_doc, indent=2).encode())
        location.fsync_keys(store, ["zarr.json"])
        actions.append("dropped the consolidated metadata copy (rewritten when the job finishes)")
    sound = True
    for name in names:
        done, ok = _repair_split(store, name, docs[name])
        actions += done
        sound &= ok
    if sound and names and root_doc.get("attributes"):
        consolidate(store)
        actions.append("every split sound and complete: consolidated metadata written again")
    return actions


def _split_doc(store, name: str, copy: dict | None) -> tuple[dict | None, list[str]]:
    """The split's own zarr.json, restored from its consolidated copy when missing or damaged and the copy is
    sound (the sealed copy is the split's document as its writer last left it)."""
    try:
        doc = read_doc(store, f"{name}/zarr.json")
        if doc is None:
            raise CorruptStoreError("its zarr.json is missing", split=name)
        seal.check(doc.get("attributes", {}), "", split=name)
        return doc, []
    except CorruptStoreError as e:
        damage = e
    if copy is not None:
        try:
            seal.check(copy.get("attributes", {}), "", split=name)
        except CorruptStoreError:
            copy = None
    if copy is None:
        raise CorruptStoreError(f"split {name!r} ({name}/zarr.json): {str(damage).lstrip(': ')}; no sound copy to "
                                "restore it from: extract the store again", split=name)
    copy = {k: v for k, v in copy.items() if k != "consolidated_metadata"}  # a node's own document has none
    location.put_bytes(store, f"{name}/zarr.json", json.dumps(copy, indent=2).encode())
    location.fsync_keys(store, [f"{name}/zarr.json"])
    return copy, [f"split {name!r}: restored {name}/zarr.json from its consolidated copy"]


def _repair_split(store, name: str, doc: dict) -> tuple[list[str], bool]:
    """Actions taken on one split (its document ``doc`` already sound), and whether it is now sound and complete."""
    actions = []
    attrs = (doc or {}).get("attributes", {})
    if not str(attrs.get("format", "")).startswith("privlin-feature-store/"):
        return actions, True
    layout = SplitLayout.from_attrs(attrs)
    for array, expected in expected_documents(layout).items():
        if array not in arrays_of(attrs):
            continue
        key = f"{name}/{array}/zarr.json"
        try:
            current = read_doc(store, key)
        except CorruptStoreError:
            current = {}
        if current is not None and canonical(current) != canonical(json.loads(expected)):
            location.put_bytes(store, key, expected)
            location.fsync_keys(store, [key])
            actions.append(f"split {name!r}: rewrote the metadata of array {array!r} from the layout")
    with quiet():
        group = zarr.open_group(store, path=name, mode="r+", use_consolidated=False)
    _, missing = split_arrays(group, name, arrays_of(attrs))
    if missing:
        return actions + [f"split {name!r}: arrays {missing} not created yet (the job creates them when "
                          "rerun)"], False
    problems = Split(group, name).damage()
    damaged = sorted({e.shard for e in problems
                      if not isinstance(e, IncompleteStoreError) and getattr(e, "shard", None) is not None})
    for shard in damaged:
        keys = [done_key(shard), manifest.manifest_key(shard), f"claims/{shard}"] + \
               [chunk_key(a, shard) for a in row_arrays_of(attrs)]
        location.delete_keys(store, [f"{name}/{k}" for k in keys])
    if damaged:
        group.attrs.put(seal.sealed({**attrs, "complete": False}))
        location.fsync_keys(store, [f"{name}/zarr.json"])
        actions.append(f"split {name!r}: cleared damaged shard(s) {damaged}; rerun the extraction job to redo them")
    return actions, not problems and bool(attrs.get("complete"))
