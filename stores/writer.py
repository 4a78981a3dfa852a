"""Writing a split shard by shard: resumable, and safe with many writers on one store.

Rules that keep data safe (zarr loses data when two writers touch one chunk file):

* a writer writes whole shards only, and every array is cut at shard boundaries (see ``layout``);
* a shard is *claimed* (an exclusive-create key holding the writer id) before it is written, so a second writer
  on the same shard gets :class:`ShardClaimedError` instead of silent overlap; a writer that restarts with the
  same ``writer_id`` (a resumed job) takes its own claims back;
* a shard is marked done only after its data is written, and a resumed writer skips done shards;
* consolidated metadata is written once, by :meth:`SplitWriter.finalize`, when every shard is done.
"""
from __future__ import annotations

import time
import warnings

import numpy as np
import zarr
from zarr.errors import ContainsArrayError, ContainsGroupError

from . import location, provenance
from .errors import ShardClaimedError
from .layout import SplitLayout, array_specs, choose_layout

MAX_LISTED_SKIPS = 10_000


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
        Versions and creation time are added. Stored as JSON data, never evaluated.
    writer_id : str
        Who writes. Shards claimed under another id are refused; a rerun with the same id resumes.

    Returns
    -------
    SplitWriter

    Raises
    ------
    ValueError
        Bad sizes, or an existing split whose layout differs from the one asked for.
    """
    if not isinstance(split, str) or not split or "/" in split or split.startswith("."):
        raise ValueError(f"split must be a plain name like 'train', got {split!r}")
    layout = choose_layout(n_rows, dim, dtype, shard_rows, chunk_rows)
    store = location.make_store(url, read_only=False)
    root = _open_root(store)
    if root_attrs:
        root.attrs.update(dict(root_attrs))
    try:
        group = root.create_group(split, attributes={**(attrs or {}), **layout.as_attrs(), "split": split,
                                                      **provenance.stamp(), "complete": False})
        for name, spec in array_specs(layout).items():
            group.create_array(name, **spec)
    except (ContainsGroupError, ContainsArrayError):
        group = root[split]
        existing = SplitLayout.from_attrs(group.attrs)
        if existing != layout:
            raise ValueError(f"split {split!r} exists with layout {existing}, not {layout}: "
                             "use another --out or delete the old split") from None
        _wait_for_arrays(group, split)
    return SplitWriter(store, group, split, layout, writer_id)


def _open_root(store, attempts: int = 20):
    """Open or create the root group; another writer creating it at the same moment is not an error."""
    for attempt in range(attempts):
        try:
            return zarr.open_group(store, mode="a")
        except ContainsGroupError:  # created by another writer between zarr's check and its create
            time.sleep(0.05 * (attempt + 1))
    return zarr.open_group(store, mode="r+")


def _wait_for_arrays(group, split: str, timeout: float = 60.0) -> None:
    """A split another writer is still creating: wait until all its arrays exist."""
    deadline = time.monotonic() + timeout
    names = set(array_specs_names())
    while not names <= _array_names(group):
        if time.monotonic() > deadline:
            raise RuntimeError(f"split {split!r} exists but its arrays {sorted(names)} did not appear within "
                               f"{timeout:.0f} s: a writer died while creating it; delete the split and rerun")
        time.sleep(0.1)


def _array_names(group) -> set[str]:
    """Names of a split's arrays; its ``claims/`` folder is ours, not a zarr node (zarr would warn about it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not recognized as a component.*")
        return {name for name, _ in group.arrays()}


def array_specs_names() -> tuple[str, ...]:
    return ("features", "labels", "ids", "valid", "done")


class SplitWriter:
    """Writes whole shards of one split; see :func:`create_split`."""

    def __init__(self, store, group, split, layout: SplitLayout, writer_id: str):
        self._store, self._group, self.split, self.layout = store, group, split, layout
        self.writer_id = str(writer_id)
        self._arrays = {name: group[name] for name in array_specs_names()}

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

    def done_mask(self) -> np.ndarray:
        return np.asarray(self._arrays["done"][:], dtype=bool)

    def pending(self) -> list[int]:
        """Shards not yet done, in order."""
        return [int(i) for i in np.flatnonzero(~self.done_mask())]

    def _claim_key(self, shard: int) -> str:
        prefix = self._group.path
        return f"{prefix}/claims/{shard}" if prefix else f"claims/{shard}"

    def _check_rows(self, shard, features, labels, ids, valid):
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
        return stored, labels.astype(np.int64), ids.astype(str), valid

    def write_shard(self, shard: int, features, labels, ids, valid=None) -> bool:
        """Write every row of ``shard`` and mark it done.

        Parameters
        ----------
        shard : int
        features : array (stop - start, D)
        labels : int array (stop - start,)
        ids : array of str (stop - start,)
            Stable row identifiers (e.g. file paths relative to the dataset root).
        valid : bool array (stop - start,), optional
            False for rows that hold no example (skipped unreadable images); readers drop them.

        Returns
        -------
        bool
            True if written, False if the shard was already done (resume).

        Raises
        ------
        ValueError
            Bad shapes, NaN/inf, non-integer or negative labels: nothing is written.
        ShardClaimedError
            Another writer id owns the shard.
        """
        self.shard_bounds(shard)  # IndexError naming the range before any read or write
        if bool(self._arrays["done"][shard]):
            return False
        stored, labels, ids, valid = self._check_rows(shard, features, labels, ids, valid)
        owner = location.set_text_if_absent(self._store, self._claim_key(shard), self.writer_id)
        if owner != self.writer_id:
            raise ShardClaimedError(f"shard {shard} of split {self.split!r} is claimed by writer {owner!r}, "
                                    f"not {self.writer_id!r}; two writers on one shard would lose data")
        start, stop = self.shard_bounds(shard)
        self._arrays["features"][start:stop] = stored
        self._arrays["labels"][start:stop] = labels
        self._arrays["ids"][start:stop] = ids
        self._arrays["valid"][start:stop] = valid
        self._arrays["done"][shard] = True  # last: a crash before this line leaves the shard to redo
        return True

    def finalize(self) -> bool:
        """If every shard is done: list skipped rows, mark complete, consolidate metadata. Returns whether it did."""
        if self.pending():
            return False
        valid = np.asarray(self._arrays["valid"][:], dtype=bool)
        skipped = np.flatnonzero(~valid)
        skipped_ids = [str(i) for i in self._arrays["ids"][:][skipped[:MAX_LISTED_SKIPS]]] if skipped.size else []
        self._group.attrs.update({"complete": True, "n_skipped": int(skipped.size), "skipped_ids": skipped_ids})
        with warnings.catch_warnings():
            # claims/ is ours (not a zarr node), and consolidated metadata is a zarr-python v3 extension: both known.
            warnings.filterwarnings("ignore", message=".*not recognized as a component.*")
            warnings.filterwarnings("ignore", message=".*Consolidated metadata.*")
            zarr.consolidate_metadata(self._store)
        return True
