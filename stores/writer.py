"""Writing a split shard by shard: resumable, safe with many writers, and durable across kills and crashes.

Rules that keep data safe (zarr loses data when two writers touch one chunk file):

* everything a writer would refuse (another extraction's provenance, another layout, damaged metadata) is
  checked before its first byte is written, so a refused job changes nothing;
* creating a split is idempotent: every writer creates what is missing with identical metadata, so a writer
  killed half-way through creating it leaves nothing a rerun (or a rank started beside it) must wait for;
* a writer writes whole shards only, and every array is cut at shard boundaries (see ``layout``);
* a shard is *claimed* (an exclusive-create key holding the writer id) before it is written, so a second writer
  on the same shard gets :class:`ShardClaimedError` instead of silent overlap; a writer that restarts with the
  same ``writer_id`` (a resumed job) takes its own claims back;
* a shard's data is fsync'ed, then its manifest (``manifest``) is written and fsync'ed, and only then is the
  shard marked done: a kill or a host crash before the mark leaves the shard to redo, never a done shard
  without its bytes;
* consolidated metadata is written once, by :meth:`SplitWriter.finalize`, when every shard is done.
"""
from __future__ import annotations

import json
import time
import warnings

import numpy as np
import zarr
from zarr.errors import ContainsArrayError, ContainsGroupError

from . import items as item_ids
from . import location, manifest, provenance, seal
from .errors import CorruptStoreError, ShardClaimedError, StoreError
from .layout import ARRAYS, FORMAT, ITEMS_ATTR, SplitLayout, array_specs, arrays_of, canonical, choose_layout, \
    chunk_key, default_items, done_key, expected_metadata, metadata_json, row_arrays_of
from .reader import FORMAT_PREFIX, Split, is_done, quiet, split_arrays

MAX_LISTED_SKIPS = 10_000
FINAL_ATTRS = ("complete", "n_skipped", "skipped_ids")  # set by finalize; everything else is fixed at creation
NAMING_ATTRS = ("backbone", "head", "dataset", "weights_sha256", "dim")  # named first when provenance differs


def check_split(url, split: str, *, n_rows: int, dim: int, dtype: str = "float16", shard_rows: int | None = None,
                chunk_rows: int | None = None, root_attrs: dict | None = None) -> SplitLayout:
    """Raise what :func:`create_split` would raise for these arguments, writing nothing.

    For a job that writes several splits: check them all before writing the first. Returns the layout.
    """
    layout, store = _layout_and_store(url, split, n_rows, dim, dtype, shard_rows, chunk_rows)
    _preflight(store, url, split, layout, root_attrs or {})
    return layout


def create_split(url, split: str, *, n_rows: int, dim: int, dtype: str = "float16", shard_rows: int | None = None,
                 chunk_rows: int | None = None, attrs: dict | None = None, root_attrs: dict | None = None,
                 writer_id: str = "0/1") -> "SplitWriter":
    """Create a split for writing, or reopen it to resume.

    Parameters
    ----------
    url : str, path or zarr Store
        Where the store lives: a local path or any fsspec URL zarr accepts (``memory://name``, ``s3://...``).
    split : str
        Split name (``"train"``, ``"test"`` ...).
    n_rows, dim : int
        Shape (N, D) of the features. Fixed at creation.
    dtype : {"float16", "float32"}
    shard_rows, chunk_rows : int, optional
        Rows per shard (unit of writing, claiming and resuming) and per checksummed chunk. Chosen for ~16 MiB
        shards and ~1 MiB chunks when omitted.
    attrs, root_attrs : dict, optional
        Provenance of the split and of the whole store (backbone, weights sha256, head, preprocessing, dataset...).
        Versions and creation time are added to ``attrs``. Stored as checksummed JSON data, never evaluated.
        ``root_attrs`` must agree with what the store already records (keys it lacks are added).
    writer_id : str
        Who writes. Shards claimed under another id are refused; a rerun with the same id resumes.

    Returns
    -------
    SplitWriter

    Raises
    ------
    ValueError
        Bad sizes, an existing split with another layout, or a store holding another extraction (``root_attrs``
        differ). Nothing is written.
    CorruptStoreError
        The store's metadata is damaged (see ``python -m stores repair``). Nothing is written.
    """
    layout, store = _layout_and_store(url, split, n_rows, dim, dtype, shard_rows, chunk_rows)
    root_attrs = json.loads(json.dumps(root_attrs or {}))
    existing_root, existing_split = _preflight(store, url, split, layout, root_attrs)
    # -- every check passed: from here on the store is written --
    root = _open_root(store)
    merged = {**(existing_root or {}), **root_attrs}
    if existing_root is None or any(existing_root.get(k) != v for k, v in root_attrs.items()):
        root.attrs.put(seal.sealed(merged))
    try:
        group = root.create_group(split, attributes=seal.sealed(
            {**(attrs or {}), **layout.as_attrs(), "split": split, **provenance.stamp(), "complete": False,
             ITEMS_ATTR: True}))
    except ContainsGroupError:  # exists, or another writer created it after our check
        group = zarr.open_group(store, path=split, mode="r+", use_consolidated=False)
        if existing_split is None and SplitLayout.from_attrs(group.attrs) != layout:
            raise ValueError(f"split {split!r} was just created by another writer with layout "
                             f"{SplitLayout.from_attrs(group.attrs)}, not {layout}") from None
    _create_missing_arrays(group, split, layout)
    return SplitWriter(store, group, split, layout, writer_id)


def _layout_and_store(url, split, n_rows, dim, dtype, shard_rows, chunk_rows):
    if not isinstance(split, str) or not split or "/" in split or split.startswith(".") \
            or split in ("claims", "manifests"):
        raise ValueError(f"split must be a plain name like 'train', got {split!r}")
    layout = choose_layout(n_rows, dim, dtype, shard_rows, chunk_rows)
    return layout, location.make_store(url, read_only=False)


def read_doc(store, key: str) -> dict | None:
    """A node's zarr.json as a dict, None when absent; unreadable JSON is a :class:`CorruptStoreError`."""
    raw = location.get_bytes(store, key)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        return doc
    except ValueError as e:
        raise CorruptStoreError(f"{key} is unreadable ({e}): the store's metadata is damaged") from None


def _preflight(store, url, split: str, layout: SplitLayout, root_attrs: dict):
    """Every reason to refuse the write, found by reading only. Returns (root attrs, split attrs) or Nones."""
    root_doc = read_doc(store, "zarr.json")
    existing_root = None
    if root_doc is not None:
        existing_root = root_doc.get("attributes", {})
        seal.check(existing_root, f"store {location.describe(url)} (zarr.json)")
        existing_root = {k: v for k, v in existing_root.items() if k != seal.SEAL_KEY}
        keys = sorted((k for k in root_attrs if k in existing_root), key=lambda k: (k not in NAMING_ATTRS, k))
        diff = [d for k in keys for d in _differences(existing_root[k], root_attrs[k], k)]
        if diff:
            detail = "; ".join(f"{k}: store has {_short(old)}, this job {_short(new)}"
                               for k, old, new in diff[:3]) + (f"; {len(diff) - 3} more" if len(diff) > 3 else "")
            raise ValueError(f"the store at {location.describe(url)} holds another extraction ({detail}); use another "
                             "--out instead of mixing features (nothing was written)")
    split_doc = read_doc(store, f"{split}/zarr.json")
    existing_split = None
    if split_doc is not None:
        existing_split = split_doc.get("attributes", {})
        fmt = str(existing_split.get("format", ""))
        if fmt != FORMAT:
            what = f"written as {fmt!r}" if fmt.startswith(FORMAT_PREFIX) else "not a feature-store split"
            raise StoreError(f"{split!r} in {location.describe(url)} is {what}, not {FORMAT!r}: use another --out")
        seal.check(existing_split, f"split {split!r} ({split}/zarr.json)", split=split)
        if not existing_split.get(ITEMS_ATTR):
            raise StoreError(f"split {split!r} in {location.describe(url)} was written before row items existed "
                             "(it still reads; it cannot be resumed): use another --out (nothing was written)")
        existing = SplitLayout.from_attrs(existing_split)
        if existing != layout:
            raise ValueError(f"split {split!r} exists with layout {existing}, not {layout}: "
                             "use another --out or delete the old split (nothing was written)")
        expected = expected_metadata(layout)
        for name in ARRAYS:
            doc = read_doc(store, f"{split}/{name}/zarr.json")
            if doc is not None and canonical(doc) != expected[name]:
                raise CorruptStoreError(f"split {split!r}, array {name!r}: metadata ({split}/{name}/zarr.json) "
                                        "differs from the split's layout (damaged; `python -m stores repair` "
                                        "rewrites it)", split=split, array=name)
    return existing_root, existing_split


_ABSENT = object()


def _differences(old, new, key: str) -> list[tuple[str, object, object]]:
    """Where two attribute values differ, down to the innermost keys (``backbone_config.weights_file``), so a
    refusal names what differs rather than two truncated documents."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new), key=str)
                for d in _differences(old.get(k, _ABSENT), new.get(k, _ABSENT), f"{key}.{k}")]
    return [] if old == new else [(key, old, new)]


def _short(value) -> str:
    if value is _ABSENT:
        return "nothing"
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _open_root(store, attempts: int = 20):
    """Open or create the root group (never from consolidated metadata: writers see the documents themselves);
    another writer creating it at the same moment is not an error."""
    for attempt in range(attempts):
        try:
            return zarr.open_group(store, mode="a", use_consolidated=False)
        except ContainsGroupError:  # created by another writer between zarr's check and its create
            time.sleep(0.05 * (attempt + 1))
    return zarr.open_group(store, mode="r+", use_consolidated=False)


def _create_missing_arrays(group, split: str, layout: SplitLayout) -> None:
    """Create the split's arrays that do not exist yet. Idempotent: the metadata is a function of the layout,
    so two writers creating the same array write the same bytes, and a rerun finishes a killed creation."""
    _, missing = split_arrays(group, split)
    for name, spec in array_specs(layout).items():
        if name in missing:
            try:
                group.create_array(name, **spec)
            except ContainsArrayError:
                pass


class SplitWriter:
    """Writes whole shards of one split; see :func:`create_split`."""

    def __init__(self, store, group, split, layout: SplitLayout, writer_id: str):
        self._store, self._group, self.split, self.layout = store, group, split, layout
        self.writer_id = str(writer_id)
        if arrays_of(group.attrs) != ARRAYS:
            raise StoreError(f"split {split!r} was written before row items existed: it cannot be resumed")
        with quiet():  # every chunk is written, even all-fill ones: absence always means damage
            self._arrays = {name: group[name].with_config({"write_empty_chunks": True}) for name in ARRAYS}
        expected = expected_metadata(layout)
        for name, array in self._arrays.items():
            if metadata_json(array.metadata) != expected[name]:
                raise CorruptStoreError(f"split {split!r}, array {name!r}: metadata differs from the layout",
                                        split=split, array=name)

    @property
    def n_shards(self) -> int:
        return self.layout.n_shards

    def shard_bounds(self, shard: int) -> tuple[int, int]:
        """Rows ``[start, stop)`` of ``shard``."""
        return self.layout.shard_bounds(shard)

    def shards_for(self, rank: int, world: int) -> list[int]:
        """Shards writer ``rank`` of ``world`` owns (round robin, so ranks finish together)."""
        if not (0 <= rank < world):
            raise ValueError(f"rank must be in [0, {world}), got {rank}")
        return list(range(rank, self.n_shards, world))

    def _reader(self) -> Split:
        with quiet():
            group = zarr.open_group(self._store, path=self.split, mode="r", use_consolidated=False)
        return Split(group, self.split)

    def done_mask(self) -> np.ndarray:
        """Bool (n_shards,); a damaged done mark is a :class:`CorruptStoreError` naming its shard."""
        return self._reader().done_mask()

    def pending(self) -> list[int]:
        """Shards not yet done, in order."""
        return [int(i) for i in np.flatnonzero(~self.done_mask())]

    def _key(self, key: str) -> str:
        prefix = self._group.path
        return f"{prefix}/{key}" if prefix else key

    def _claim_key(self, shard: int) -> str:
        return self._key(f"claims/{shard}")

    def _check_rows(self, shard, features, labels, ids, valid, items):
        start, stop = self.shard_bounds(shard)
        n = stop - start
        features = np.asarray(features)
        if features.ndim != 2 or features.shape != (n, self.layout.dim):
            raise ValueError(f"shard {shard} holds rows [{start}, {stop}): features must have shape "
                             f"({n}, {self.layout.dim}), got {features.shape}")
        if not np.issubdtype(features.dtype, np.floating):
            raise ValueError(f"features must be floating point, got {features.dtype}")
        with np.errstate(over="ignore"):  # overflow is reported below as an error, not a warning
            stored = features.astype(self.layout.dtype)
        if not np.isfinite(stored).all():
            bad = int(np.flatnonzero(~np.isfinite(stored).all(axis=1))[0]) + start
            why = " (overflows float16)" if np.isfinite(features).all() else ""
            raise ValueError(f"features contain NaN or inf{why}, first at row {bad}")
        labels = np.asarray(labels)
        if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"labels must be integers of shape ({n},), got {labels.dtype} {labels.shape}")
        valid = np.ones(n, dtype=bool) if valid is None else np.asarray(valid)
        if valid.shape != (n,) or valid.dtype != bool:
            raise ValueError(f"valid must be a boolean mask of shape ({n},), got {valid.dtype} {valid.shape}")
        if (labels[valid] < 0).any():
            raise ValueError("labels of valid rows must be >= 0")
        ids = np.asarray(ids)
        if ids.shape != (n,):
            raise ValueError(f"ids must have shape ({n},), got {ids.shape}")
        ids = ids.astype(str)
        for i, text in enumerate(ids):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"ids must be valid UTF-8 text; row {start + i} is {str(text)!r}") from None
        items = default_items(ids) if items is None else item_ids.check(items, n)
        return stored, labels.astype(np.int64), ids, valid, items

    def write_shard(self, shard: int, features, labels, ids, valid=None, items=None) -> bool:
        """Write every row of ``shard``, make it durable, record its manifest and mark it done.

        Parameters
        ----------
        shard : int
        features : array (stop - start, D)
        labels : int array (stop - start,)
        ids : array of str (stop - start,)
            Stable row identifiers (e.g. file paths relative to the dataset root), valid UTF-8.
        valid : bool array (stop - start,), optional
            False for rows that hold no example (skipped unreadable images); readers drop them.
        items : array of str (stop - start,), optional
            Each row's source item (``stores.items``: the hash of the source file's bytes, or of a public name),
            what a privacy ledger charges. None: each id as a public name (``layout.default_items``), for stores
            written by hand, where an id names the example.

        Returns
        -------
        bool
            True if written, False if the shard was already done (resume).

        Raises
        ------
        ValueError
            Bad shapes, NaN/inf, non-integer or negative labels, ids that are not UTF-8, malformed items: nothing is
            written.
        ShardClaimedError
            Another writer id owns the shard.
        """
        self.shard_bounds(shard)  # IndexError naming the range before any read or write
        if is_done(self._arrays["done"], self.split, shard):
            return False
        stored, labels, ids, valid, items = self._check_rows(shard, features, labels, ids, valid, items)
        owner = location.set_text_if_absent(self._store, self._claim_key(shard), self.writer_id)
        if owner != self.writer_id:
            raise ShardClaimedError(f"shard {shard} of split {self.split!r} is claimed by writer {owner!r}, "
                                    f"not {self.writer_id!r}; two writers on one shard would lose data")
        data_keys = [self._key(chunk_key(a, shard)) for a in row_arrays_of(self._group.attrs)]
        mark_keys = [self._key(manifest.manifest_key(shard)), self._key(done_key(shard))]
        # temporary files a killed write of this shard left behind: ours to remove, this writer holds the claim
        location.remove_partials(self._store, data_keys + mark_keys + [self._claim_key(shard)])
        start, stop = self.shard_bounds(shard)
        self._arrays["features"][start:stop] = stored
        self._arrays["labels"][start:stop] = labels
        self._arrays["ids"][start:stop] = ids
        self._arrays["items"][start:stop] = items
        self._arrays["valid"][start:stop] = valid
        location.fsync_keys(self._store, data_keys)
        record = manifest.build(self._store, self._group.path, self.split, shard, self.layout,
                                arrays=row_arrays_of(self._group.attrs))
        location.put_bytes(self._store, mark_keys[0], record)
        location.fsync_keys(self._store, mark_keys[:1])
        self._arrays["done"][shard] = True  # last: a crash before this line leaves the shard to redo
        location.fsync_keys(self._store, mark_keys[1:])
        return True

    def finalize(self) -> bool:
        """If every shard is done: list skipped rows, mark complete, consolidate metadata. Returns whether it did.

        Every shard's manifest is checked and the valid mask and ids are read through them (features are not read
        again: on a large store that would be a second pass over it; ``verify`` does that).
        """
        if self.pending():
            return False
        reader = self._reader()
        for shard in range(self.n_shards):
            reader._manifest(shard)
        valid = reader.valid_mask()
        skipped = np.flatnonzero(~valid)
        skipped_ids = [str(i) for i in reader.ids[:][skipped[:MAX_LISTED_SKIPS]]] if skipped.size else []
        attrs = {k: v for k, v in self._group.attrs.items() if k not in FINAL_ATTRS}
        self._group.attrs.put(seal.sealed({**attrs, "complete": True, "n_skipped": int(skipped.size),
                                           "skipped_ids": skipped_ids}))
        location.fsync_keys(self._store, [self._key("zarr.json")])
        consolidate(self._store)
        return True


def consolidate(store) -> None:
    """Write the consolidated metadata (every node's document copied into the root ``zarr.json``)."""
    with quiet(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Consolidated metadata.*")  # a zarr-python v3 extension: known
        try:
            zarr.consolidate_metadata(store)
        except (ValueError, TypeError, KeyError) as e:  # a node's zarr.json is unreadable: name it
            for key in location.list_keys(store, "zarr.json"):
                read_doc(store, key)
            raise CorruptStoreError(f"the store's metadata cannot be consolidated: {e}") from None
    location.fsync_keys(store, ["zarr.json"])
