"""Reading a feature store: verified row arrays, streaming row blocks, and a full verification.

Nothing is read past a check: the metadata must match its seal (``seal``) and the layout, a shard must be done
and carry a manifest, and every chunk file must match the manifest and its crc32c (``chunks``). Damage of any
kind is a :class:`CorruptStoreError` naming the split, the shard and the file, never zeros or dropped rows.
"""
from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import numpy as np
import zarr
import zarr.errors

from . import buffers, chunks, location, manifest, seal
from .errors import CorruptStoreError, IncompleteStoreError, StoreError
from .layout import ARRAYS, FORMAT, ITEMS_ATTR, SplitLayout, arrays_of, default_items, done_key, expected_metadata, \
    metadata_json, row_arrays_of

FORMAT_PREFIX = "privlin-feature-store/"


def open(url) -> "FeatureStore":  # noqa: A001 - mirrors zarr.open / stores.open in the docs
    """Open a feature store read-only: a local path, an fsspec URL (``memory://``, ``s3://``...) or a zarr Store.

    Raises
    ------
    FileNotFoundError
        Nothing there.
    CorruptStoreError
        The store's ``zarr.json`` is unreadable or its attributes fail their checksum.
    """
    store = location.make_store(url, read_only=True)
    return FeatureStore(open_root(store, url), url)


def open_root(store, url, *, consolidated: bool | None = None) -> zarr.Group:
    """The root group; unreadable metadata is a :class:`CorruptStoreError`, not a JSON traceback."""
    try:
        with quiet():
            root = zarr.open_group(store, mode="r", use_consolidated=consolidated)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, zarr.errors.NodeTypeValidationError) as e:
        raise FileNotFoundError(f"no feature store at {location.describe(url)}") from e
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError, MetadataValidationError, ...
        raise CorruptStoreError(f"store {location.describe(url)}: metadata (zarr.json) is unreadable: {e}") from None
    seal.check(dict(root.attrs), f"store {location.describe(url)} (zarr.json)")
    return root


@contextlib.contextmanager
def quiet():
    """Our ``claims/`` and ``manifests/`` folders are not zarr nodes; zarr's listing would warn about them."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not recognized as a component.*")
        yield


def child_groups(group: zarr.Group) -> dict[str, zarr.Group]:
    with quiet():
        try:
            return dict(group.groups())
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptStoreError(f"metadata (zarr.json) under {group.store!r} is unreadable: {e}") from None


def split_arrays(group: zarr.Group, split: str, arrays=ARRAYS) -> tuple[dict, list[str]]:
    """The split's ``arrays`` that exist, and the names of those that do not; unreadable metadata names its array."""
    present, missing = {}, []
    for a in arrays:
        try:
            with quiet():
                node = group[a]
        except KeyError:
            missing.append(a)
            continue
        except (ValueError, TypeError) as e:
            raise CorruptStoreError(f"split {split!r}, array {a!r}: metadata ({split}/{a}/zarr.json) is unreadable: "
                                    f"{e}", split=split, array=a) from None
        if not isinstance(node, zarr.Array):
            raise CorruptStoreError(f"split {split!r}: {a!r} is not an array", split=split, array=a)
        present[a] = node
    return present, missing


class FeatureStore:
    """A group of splits written by one (backbone, head, dataset) extraction."""

    def __init__(self, root: zarr.Group, url):
        self._root, self.url = root, url

    @property
    def attrs(self) -> dict:
        return {k: v for k, v in self._root.attrs.items() if k != seal.SEAL_KEY}

    @property
    def splits(self) -> list[str]:
        return sorted(name for name, g in child_groups(self._root).items()
                      if str(g.attrs.get("format", "")).startswith(FORMAT_PREFIX))

    def __getitem__(self, split: str) -> "Split":
        groups = child_groups(self._root)
        if split not in groups or not str(groups[split].attrs.get("format", "")).startswith(FORMAT_PREFIX):
            raise KeyError(f"no split {split!r} in {self.url!r}; splits: {self.splits}")
        return Split(groups[split], split)

    def __contains__(self, split: str) -> bool:
        return split in self.splits

    def __repr__(self) -> str:
        return f"FeatureStore({self.url!r}, splits={self.splits})"

    def damage(self, notes: list[str] | None = None) -> list[StoreError]:
        """Every problem found by reading all metadata, manifests and chunks (empty when the store is sound).

        ``notes``, when given, receives what is sound but worth a line (a consolidated ledger anchor one charge
        behind, the state a crash inside a charge leaves)."""
        found: list[StoreError] = []
        if self._root.metadata.consolidated_metadata is not None:
            found += _stale_consolidated(self._root, self.url, [] if notes is None else notes)
        for name in self.splits:
            try:
                sp = self[name]
            except StoreError as e:
                found.append(e)
                continue
            found += sp.damage()
        return found

    def verify(self) -> None:
        """Read every chunk of every split against its manifest and checksums, and every metadata seal.

        Raises
        ------
        CorruptStoreError
            One line naming the split, shard and file of the first problem, and how many there are.
        """
        found = self.damage()
        if found:
            raise summarize(found)


def summarize(found: list[StoreError]) -> StoreError:
    """One error for many problems: the first one's words, how many more; incomplete only if nothing is damaged."""
    first = found[0]
    more = f" (and {len(found) - 1} more problem{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
    kind = IncompleteStoreError if all(isinstance(e, IncompleteStoreError) for e in found) else CorruptStoreError
    err = kind(f"{first}{more}")
    err.split, err.shard, err.array = (getattr(first, a, None) for a in ("split", "shard", "array"))
    err.problems = found
    return err


def _stale_consolidated(root: zarr.Group, url, notes: list[str]) -> list[StoreError]:
    """The consolidated copy in the root ``zarr.json`` must equal each node's own document, except a ledger anchor
    one charge behind (:func:`lagging_copies`), which goes to ``notes``."""
    try:
        own = open_root(root.store, url, consolidated=False)
        own_groups = child_groups(own)
    except StoreError as e:
        return [e]
    out = []
    for name, g in child_groups(root).items():
        mine = own_groups.get(name)
        docs_differ = mine is None or dict(mine.attrs) != dict(g.attrs)
        if docs_differ and mine is not None and lagging_copies(dict(mine.attrs), dict(g.attrs)):
            docs_differ = False
            notes.append(f"split {name!r}: the consolidated copy of its privacy-ledger anchor is behind "
                         f"{name}/zarr.json (a charge was interrupted between its two writes; the ledger reads the "
                         "split's own document; the next charge or `python -m stores repair` rewrites the copy)")
        if not docs_differ:
            with quiet():
                try:
                    docs_differ = any(metadata_json(a.metadata) != metadata_json(mine[n].metadata)
                                      for n, a in g.arrays())
                except (KeyError, ValueError, TypeError):
                    docs_differ = True
        if docs_differ:
            out.append(CorruptStoreError(
                f"split {name!r}: the consolidated copy of its metadata in the store's zarr.json differs from "
                f"{name}/zarr.json (damaged copy; `python -m stores repair` rebuilds it)", split=name))
    return out


class RowArray:
    """One row array of a split (``features``, ``labels`` or ``ids``): slicing returns NumPy read through the
    manifests, so a damaged chunk is an error. ``.zarr`` is the underlying zarr array (unverified)."""

    def __init__(self, split: "Split", name: str):
        self._split, self.name = split, name
        self.zarr = split._group[name]
        self.shape, self.dtype = self.zarr.shape, self.zarr.dtype
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        out = self[:]
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, key):
        rest = ()
        if isinstance(key, tuple):
            key, rest = key[0], key[1:]
        if isinstance(key, (int, np.integer)):
            i = int(key) + (self.shape[0] if key < 0 else 0)
            if not 0 <= i < self.shape[0]:
                raise IndexError(f"row {key} out of range for {self.shape[0]} rows")
            return self._read(i, i + 1)[(0, *rest)]
        if not isinstance(key, slice):
            raise TypeError("index rows with an int or a slice (then NumPy indexing on the result)")
        start, stop, step = key.indices(self.shape[0])
        lo, hi = (start, stop) if step > 0 else (stop + 1, start + 1)
        rows = self._read(lo, max(lo, hi))
        picked = rows[::step] if step > 0 else rows[::-1][::-step]
        return picked[(slice(None), *rest)] if rest else picked

    def _read(self, start: int, stop: int) -> np.ndarray:
        rows = self._split._rows(self.name, start, stop)
        return rows.astype("U32") if self.name == "items" else rows  # items are read as ASCII bytes

    def __repr__(self) -> str:
        return f"RowArray({self._split.name!r}/{self.name}, shape={self.shape}, dtype={self.dtype})"


class Split:
    """One split: ``features`` (N, D), ``labels`` (N,), ``ids`` (N,), read lazily and verified.

    ``len(split)`` counts the valid rows (rows skipped at extraction are dropped by every reader, unless
    ``blocks(with_skipped=True)`` asks for them); ``split.layout.n_rows`` is the split's row count, skipped rows
    included (fixed when the split was created, before any image was decoded).
    """

    def __init__(self, group: zarr.Group, name: str):
        self._group, self.name = group, name
        attrs = dict(group.attrs)
        if attrs.get("format") != FORMAT:
            raise StoreError(f"split {name!r} was written as {attrs.get('format')!r}, not {FORMAT!r} (no shard "
                             "manifests or metadata checksums, so missing chunks cannot be told from data): "
                             "rerun featurize into a new --out")
        seal.check(attrs, f"split {name!r} (zarr.json)", split=name)
        self.layout = SplitLayout.from_attrs(attrs)
        self.arrays, self.row_arrays = arrays_of(attrs), row_arrays_of(attrs)
        present, missing = split_arrays(group, name, self.arrays)
        if missing:
            raise IncompleteStoreError(f"split {name!r} was not fully created (arrays {missing} missing: its writer "
                                       "died while creating it); rerun the extraction job")
        expected = expected_metadata(self.layout)
        for a in self.arrays:
            if metadata_json(present[a].metadata) != expected[a]:
                raise CorruptStoreError(f"split {name!r}, array {a!r}: metadata ({name}/{a}/zarr.json) differs "
                                        "from the split's layout (damaged)", split=name, array=a)
        self._files = chunks.ShardFiles(group.store, group.path, name, self.layout)
        self._manifests: dict[int, manifest.Manifest] = {}
        self._valid = None
        self._all_done = False
        # block buffers, kept for the next pass over the split: ordinary, and page-locked for a GPU's copy
        self._buffers = {False: buffers.Recycler(), True: buffers.Recycler(buffers.page_locked)}

    features = property(lambda self: RowArray(self, "features"), doc="(N, D) rows; slicing returns verified NumPy")
    labels = property(lambda self: RowArray(self, "labels"), doc="(N,) int64; slicing returns verified NumPy")
    ids = property(lambda self: RowArray(self, "ids"), doc="(N,) str: stable row identifiers")

    @property
    def items_recorded(self) -> bool:
        """Whether the split records its rows' items; False for a split written before items existed, whose
        :attr:`items` are its ids as public names (``layout.default_items``)."""
        return bool(self.attrs.get(ITEMS_ATTR))

    @property
    def items(self):
        """(N,) str: each row's source item (``stores.items``), skipped rows included; slicing returns verified
        NumPy. A split written before items existed gives ``layout.default_items`` of its ids (an array)."""
        return RowArray(self, "items") if self.items_recorded else default_items(self.ids[:])

    def item_bytes(self) -> np.ndarray:
        """Every row's item as 32 ASCII bytes (``S32``, what a ledger hashes: a quarter of :attr:`items`' memory)."""
        if not self.items_recorded:
            return default_items(self.ids[:]).astype("S32")
        return self._rows("items", 0, self.layout.n_rows)
    dim = property(lambda self: self.layout.dim, doc="feature dimension D")

    @property
    def attrs(self) -> dict:
        return {k: v for k, v in self._group.attrs.items() if k != seal.SEAL_KEY}

    def __repr__(self) -> str:
        return f"Split({self.name!r}, n={self.layout.n_rows}, dim={self.dim}, dtype={self.layout.dtype})"

    # ------------------------------------------------------------------------------------------ checks

    def done_mask(self) -> np.ndarray:
        """Bool (n_shards,): shards written and marked done; a damaged mark is an error naming its shard."""
        try:
            return np.asarray(self._group["done"][:], dtype=bool)
        except ValueError:  # a done chunk failed its checksum: find which
            for shard in range(self.layout.n_shards):
                is_done(self._group["done"], self.name, shard)
            raise

    def _require_done(self) -> None:
        if self._all_done:
            return
        done = self.done_mask()
        self._all_done = bool(done.all())
        if not done.all():
            missing = np.flatnonzero(~done)
            raise IncompleteStoreError(
                f"split {self.name!r} has {missing.size} of {done.size} shards not written "
                f"(first: {missing[:8].tolist()}); rerun the extraction job to finish it")

    def _manifest(self, shard: int) -> manifest.Manifest:
        if shard not in self._manifests:
            raw = location.get_bytes(self._group.store, f"{self._group.path}/{manifest.manifest_key(shard)}")
            self._manifests[shard] = manifest.load(raw, self.name, shard, self.layout, arrays=self.row_arrays)
        return self._manifests[shard]

    # ------------------------------------------------------------------------------------------ reads

    def _rows(self, array: str, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of ``array``, every shard checked (the split must be complete)."""
        self._require_done()
        lay = self.layout
        if array == "features":
            out = np.empty((stop - start, lay.dim), dtype=lay.dtype)
            for shard in range(start // lay.shard_rows, -(-stop // lay.shard_rows)):
                a, b = lay.shard_bounds(shard)
                a, b = max(a, start), min(b, stop)
                self._files.read_features(shard, out[a - start:b - start], self._manifest(shard).files["features"],
                                          first_row=a - shard * lay.shard_rows)
            return out
        parts = []
        for shard in range(start // lay.shard_rows, -(-stop // lay.shard_rows)):
            a, b = lay.shard_bounds(shard)
            values = self._files.read_small(shard, array, self._manifest(shard).files[array])
            parts.append(values[max(a, start) - a:min(b, stop) - a])
        if not parts:
            return np.empty(0, dtype=np.dtypes.StringDType() if array == "ids" else _SMALL_DTYPES[array])
        return np.concatenate(parts)

    def valid_mask(self) -> np.ndarray:
        """Bool (N,): False for rows skipped at extraction."""
        if self._valid is None:
            self._valid = self._rows("valid", 0, self.layout.n_rows).astype(bool)
        return self._valid

    def __len__(self) -> int:
        return int(self.valid_mask().sum())

    def blocks(self, rows: int = 65536, dtype=None, shards: range | None = None,
               page_locked: bool = False, with_skipped: bool = False) -> Iterator[tuple[np.ndarray, ...]]:
        """Yield ``(X, y)`` NumPy blocks of the valid rows in row order without loading the split.

        Parameters
        ----------
        rows : int
            Rows per block, rounded up to whole shards, so no chunk is read twice.
        dtype : numpy dtype, optional
            Cast features to this dtype. Default: as stored (float16 stays float16, no conversion, for callers
            that convert on their device).
        shards : range, optional
            Only these shards (a contiguous range, e.g. one process's share of a split); default all.
        page_locked : bool
            Read into page-locked host memory (needs CUDA), which a GPU copies faster than ordinary memory.
        with_skipped : bool
            Yield every row, skipped ones included (their features and labels as stored), and the valid mask:
            ``(X, y, valid)``, blocks aligned with the shards (what a reader that keeps the split's row count,
            e.g. privlin's private fits, reads).

        Yields
        ------
        X : ndarray (b, D)
        y : ndarray (b,) int64
        valid : ndarray (b,) bool
            Only with ``with_skipped``: False for a row skipped at extraction.

        Notes
        -----
        Every chunk is checked against its crc32c and its shard manifest. Block buffers (at most
        ``buffers.Recycler.KEEP``, held by this Split for its next passes) are reused once the caller holds no reference
        to a block: fresh memory costs a page fault per 4 KiB, which makes a copy much slower.
        A block the caller keeps is never overwritten.
        """
        if rows <= 0:
            raise ValueError(f"rows must be positive, got {rows}")
        self._require_done()
        valid = self.valid_mask()
        lay = self.layout
        shards = range(lay.n_shards) if shards is None else shards
        if shards.step != 1 or shards.start < 0 or shards.stop > lay.n_shards:
            raise ValueError(f"shards must be a contiguous range within 0..{lay.n_shards}, got {shards}")
        step = -(-int(rows) // lay.shard_rows) * lay.shard_rows
        first, last = shards.start * lay.shard_rows, min(shards.stop * lay.shard_rows, lay.n_rows)
        for start in range(first, last, step):
            stop = min(start + step, last)
            X, y = self._block(start, stop, None if with_skipped else valid, dtype,
                               self._buffers[bool(page_locked)])
            yield (X, y, valid[start:stop]) if with_skipped else (X, y)
            del X, y  # so the buffer can be reused if the caller let go of it too

    def _block(self, start: int, stop: int, valid: np.ndarray | None, dtype, pool: buffers.Recycler):
        """Rows ``[start, stop)``; with ``valid``, only the valid ones."""
        X = pool.take((stop - start, self.dim), self.layout.dtype)
        self._read_features_parallel(start, stop, X)
        y = self._rows("labels", start, stop)
        keep = None if valid is None else valid[start:stop]
        if keep is not None and not keep.all():
            X, y = np.compress(keep, X, axis=0, out=pool.take((int(keep.sum()), self.dim), X.dtype)), y[keep]
        if dtype is not None and np.dtype(dtype) != X.dtype:
            converted = pool.take(X.shape, dtype)
            converted[...] = X
            X = converted
        return X, y

    def _read_features_parallel(self, start: int, stop: int, out: np.ndarray) -> None:
        """Whole shards ``[start, stop)`` read in parallel threads straight into ``out``."""
        jobs = []
        for shard in range(start // self.layout.shard_rows, -(-stop // self.layout.shard_rows)):
            a, b = self.layout.shard_bounds(shard)
            jobs.append((shard, out[a - start:b - start], self._manifest(shard).files["features"]))
        list(buffers.io_pool().map(lambda job: self._files.read_features(*job), jobs))

    def to_numpy(self, dtype=None) -> tuple[np.ndarray, np.ndarray]:
        """All valid rows as ``(X (n, D), y (n,))``."""
        n = len(self)
        X = np.empty((n, self.dim), dtype=dtype or self.layout.dtype)
        y = np.empty(n, dtype=np.int64)
        at = 0
        for Xb, yb in self.blocks(dtype=dtype):
            X[at:at + len(yb)], y[at:at + len(yb)] = Xb, yb
            at += len(yb)
        return X, y

    # ------------------------------------------------------------------------------------------ verification

    def damage(self) -> list[StoreError]:
        """Every problem of this split, one per damaged or unfinished shard (empty when sound)."""
        try:
            done, found = self.done_mask(), []
        except CorruptStoreError:
            done, found = np.ones(self.layout.n_shards, bool), []
            for shard in range(self.layout.n_shards):
                try:
                    done[shard] = is_done(self._group["done"], self.name, shard)
                except CorruptStoreError as e:
                    found.append(e)
        if not done.all():
            missing = np.flatnonzero(~done)
            found.append(IncompleteStoreError(f"split {self.name!r} has {missing.size} of {done.size} shards not "
                                              f"written (first: {missing[:8].tolist()}); rerun the extraction job"))
            found[-1].split, found[-1].shard, found[-1].array = self.name, int(missing[0]), "done"
        bad_shards = {e.shard for e in found if getattr(e, "array", None) == "done"}
        scratch = np.empty((self.layout.shard_rows, self.dim), dtype=self.layout.dtype)
        for shard in range(self.layout.n_shards):
            if shard in bad_shards or not done[shard]:
                continue
            try:
                m = self._manifest(shard)
                a, b = self.layout.shard_bounds(shard)
                self._files.read_features(shard, scratch[:b - a], m.files["features"])
                for array in self.row_arrays[1:]:
                    self._files.read_small(shard, array, m.files[array])
            except CorruptStoreError as e:
                found.append(e)
        if not found and self.attrs.get("complete"):
            skipped = int((~self.valid_mask()).sum())
            if self.attrs.get("n_skipped") != skipped:
                found.append(CorruptStoreError(f"split {self.name!r}: attributes say {self.attrs.get('n_skipped')} "
                                               f"skipped rows, the valid mask {skipped}", split=self.name))
        return found

    def verify(self) -> None:
        """Check every shard is done and every chunk of every array matches its manifest and checksum."""
        found = self.damage()
        if found:
            raise summarize(found)


_SMALL_DTYPES = {"labels": np.int64, "valid": bool, "items": "S32"}


def is_done(done: zarr.Array, split: str, shard: int) -> bool:
    """Shard ``shard``'s done mark; a mark that fails its checksum is a :class:`CorruptStoreError`."""
    try:
        return bool(done[shard])
    except ValueError as e:
        raise CorruptStoreError(f"split {split!r}, shard {shard}, done mark ({done_key(shard)}): {e}",
                                split=split, shard=shard, array="done") from None


#: The split attribute where a pre-home privacy ledger anchored its chain (``stores.anchor``).
ANCHOR_KEY = "privacy_ledger"


def lagging_copies(own: dict, copy: dict) -> bool:
    """Whether a split's consolidated attributes ``copy`` differ from its own ``own`` only in the ledger anchor, both
    sealed: the state a crash inside a charge leaves (not damage; the anchor is read from the split's own document)."""
    try:
        seal.check(own, ""), seal.check(copy, "")
    except CorruptStoreError:
        return False
    drop = (ANCHOR_KEY, seal.SEAL_KEY)
    return {k: v for k, v in own.items() if k not in drop} == {k: v for k, v in copy.items() if k not in drop}
