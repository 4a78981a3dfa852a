"""What a user passes, turned into a source of private rows: the one place privlin looks at inputs.

A :class:`Source` gives row blocks in order (features as stored: float16 stays float16 until the device),
N and the dimension (public), the public class list, and the ledger it charges.  It accepts a
``stores.FeatureStore`` (with a split name), a ``stores.Split``, a store path or fsspec URL, or ``(X, y)``
arrays.  Nothing else in privlin duck-types its inputs.

Class-list policy (one everywhere): the classes given by the caller; else the store's ``classes`` attribute,
which ``featurize`` writes from the dataset's public metadata (labels index it, so the classes are
``0 .. len-1``); else the set of private labels, read with a :class:`PrivacyLeakWarning` (that set is then
released without noise).

Rows skipped at extraction (``featurize --skip-bad``: an image that did not decode) are null rows of a private
fit: N is the split's row count, skipped rows included (fixed when the split was created, so public), and a
skipped row reaches the runner as a zero row marked invalid, which contributes nothing (the zero-out
neighbour).  Whether one private image decodes therefore changes no released N, σ or plan.  Only the
non-private helpers (:meth:`Source.blocks`: evaluation, k-NN) leave skipped rows out: they have no features.
"""
from __future__ import annotations

import os
import warnings
from typing import Iterator

import numpy as np

from .report import PrivacyLeakWarning
from .spelling import check_split

__all__ = ["Source", "ArraySource", "SplitSource", "as_source", "is_store_like", "public_classes", "label_index",
           "row_labels", "open_store"]


class Source:
    """Rows a private fit reads.

    Attributes
    ----------
    n : int
        Rows a private fit counts (public under the neighbouring relation: the N of the plan, the report and the
        ledger), all processes together.  A store split's row count, rows skipped at extraction included.
    n_local, n_local_max : int
        Rows this process's :meth:`fit_blocks` yields, and the most any process's does (public: from the store's
        layout).  Under ``jax.distributed`` each process reads its own share; otherwise both equal ``n``.
    dim : int
    in_memory : bool
        The rows are already in memory (arrays).
    description : str
        What the rows are, for reports: ``"store feats.zarr, split 'train'"`` or ``"arrays"``.
    """

    n: int
    dim: int
    in_memory: bool
    description: str

    n_local: int
    n_local_max: int
    #: Bytes per feature value as read (2 for float16 rows, else 4: wider rows are read as float32).
    itemsize: int = 4
    #: Every value is finite by construction (a store's writer refuses NaN/inf): no per-block check needed.
    finite = False

    def blocks(self, rows: int, page_locked: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(X (b, dim), y (b,))`` of this process's rows that have features (a store's skipped rows left out),
        in row order, X as stored (in page-locked host memory where asked and the source reads into buffers of
        its own).  For the non-private helpers (evaluation, k-NN, counts of correct predictions); a private fit
        reads :meth:`fit_blocks`."""
        raise NotImplementedError

    def fit_blocks(self, rows: int, page_locked: bool = False) -> Iterator[tuple]:
        """``(X (b, dim), y (b,), valid)`` of every row a private fit counts in N (this process's share), in row
        order: ``valid`` is None where every row of the block has features, else a bool (b,) that is False for a
        null row (a store's skipped row), whose features are zero.  ``n_local`` rows in all."""
        for X, y in self.blocks(rows, page_locked=page_locked):
            yield X, y, None

    @property
    def n_valid(self) -> int:
        """Rows :meth:`blocks` yields on this process (private for a private split: whether its images decoded;
        for the non-private helpers, e.g. the denominator of an accuracy)."""
        return self.n_local

    def same_rows(self, other: "Source") -> bool:
        """Whether ``other`` reads these very rows (a sweep refuses to score its training rows)."""
        return False

    def block_count(self, rows: int) -> int:
        """How many blocks :meth:`blocks` yields on the process that yields the most (public)."""
        return -(-self.n_local_max // rows) if self.n_local_max else 0

    def block_size(self, rows: int) -> int:
        """The most rows one block of :meth:`blocks` holds."""
        return int(rows)

    def labels(self) -> np.ndarray:
        """The labels of the rows with features (``n_valid``,): private, read only by the class-list fallback."""
        raise NotImplementedError

    def published_classes(self):
        """The class names the data's provenance publishes, or None."""
        return None

    #: NumPy dtype kind of the labels (schema, public), or None where unknown.
    label_kind: str | None = None

    def ids(self) -> np.ndarray:
        """Identifiers of the rows :meth:`blocks` yields, in its order: the store's ids, else the row numbers as
        strings."""
        return np.arange(self.n).astype(str)

    def ledger(self, *, cap=None, ledger=None):
        """The :class:`privlin.ledger.PrivacyLedger` a mechanism on these rows charges (None: nothing to charge)."""
        raise NotImplementedError


class ArraySource(Source):
    """Rows in memory: ``X`` (n, d), ``y`` (n,)."""

    in_memory = True
    description = "arrays"

    def __init__(self, X, y):
        X, y = np.asarray(X), row_labels(y)
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValueError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
        if not np.issubdtype(X.dtype, np.floating):
            X = X.astype(np.float32)
        if _process_count() > 1:
            raise ValueError("under jax.distributed each process reads its share of a store split; pass the store "
                             "(arrays would be fitted once per process)")
        self.X, self.y = X, y
        self.label_kind = y.dtype.kind
        self.n, self.dim = X.shape
        self.n_local = self.n_local_max = self.n
        self.itemsize = 2 if X.dtype == np.float16 else 4

    def labels(self) -> np.ndarray:
        return self.y

    def same_rows(self, other: Source) -> bool:
        return isinstance(other, ArraySource) and np.may_share_memory(self.X, other.X)

    def blocks(self, rows: int, page_locked: bool = False):  # views of X: nothing to read into
        for start in range(0, self.n, rows):
            yield self.X[start:start + rows], self.y[start:start + rows]

    def ledger(self, *, cap=None, ledger=None):
        """A given ledger (``PrivacyLedger.for_items(ids)`` or ``for_split`` charge the rows' items in the ledger home),
        else an in-memory one when a cap is given, else none: arrays without item ids compose with nothing else."""
        from .ledger import PrivacyLedger

        if ledger is not None:
            return ledger.request_cap(cap)
        return PrivacyLedger.in_memory(cap=cap) if cap is not None else None


class SplitSource(Source):
    """A split of a :mod:`stores` feature store, streamed with ``split.blocks`` (bounded memory)."""

    in_memory = False

    finite = True

    label_kind = "i"  # a store's labels are int64 class indices (stores.reader)

    def __init__(self, split, store=None):
        self.split, self.store = split, store
        lay = split.layout
        # N: the split's rows, skipped ones included (the layout, fixed before any image was decoded).  Not
        # len(split), which counts the rows whose image decoded: one private image would move it.
        self.n = int(lay.n_rows)
        self.dim = int(split.dim)
        self.url = _split_url(split)
        self.description = f"store {self.url or '(no path)'}, split {split.name!r}"
        shares = _shard_shares(lay.n_shards, _process_count())
        counts = [max(0, min(s.stop * lay.shard_rows, lay.n_rows) - s.start * lay.shard_rows) for s in shares]
        self.shards = shares[_process_index()]
        self.n_local, self.n_local_max = counts[_process_index()], max(counts)
        self._shard_rows = lay.shard_rows
        self.itemsize = 2 if np.dtype(lay.dtype) == np.float16 else 4
        self._ledger = None  # the split's item ledger, made at the first charge (reads the items once)

    @property
    def n_valid(self) -> int:
        lay = self.split.layout
        return int(self.split.valid_mask()[self.shards.start * lay.shard_rows:self.shards.stop * lay.shard_rows].sum())

    def labels(self) -> np.ndarray:
        return np.asarray(self.split.labels[:])[self.split.valid_mask()]

    def same_rows(self, other: Source) -> bool:
        return (isinstance(other, SplitSource) and self.url is not None
                and (other.url, other.split.name) == (self.url, self.split.name))

    def blocks(self, rows: int, page_locked: bool = False):
        yield from self.split.blocks(rows=rows, shards=self.shards, page_locked=page_locked)

    def fit_blocks(self, rows: int, page_locked: bool = False):
        """Every row of this process's shards; a skipped row's features are zeroed here (the store holds zeros
        from featurize, but any finite values from another writer), so it is a null row whatever it holds."""
        for X, y, valid in self.split.blocks(rows=rows, shards=self.shards, page_locked=page_locked,
                                             with_skipped=True):
            if valid.all():
                yield X, y, None
            else:
                X[~valid] = 0  # the reader's own buffer, handed to us: no copy
                yield X, y, valid
            del X, y

    def block_size(self, rows: int) -> int:
        """Blocks are whole shards."""
        return -(-int(rows) // self._shard_rows) * self._shard_rows

    def block_count(self, rows: int) -> int:
        """Blocks are whole shards: the process with the most shards yields the most blocks."""
        per_block = -(-int(rows) // self._shard_rows)
        most = max(len(s) for s in _shard_shares(self.split.layout.n_shards, _process_count()))
        return -(-most // per_block)

    def ids(self) -> np.ndarray:
        return np.asarray(self.split.ids[:])[self.split.valid_mask()]

    def published_classes(self):
        names = (self.split.attrs or {}).get("classes")
        if names is None and self.store is not None:
            names = (self.store.attrs or {}).get("classes")
        return names

    def ledger(self, *, cap=None, ledger=None):
        """The ledger of the split's items in the ledger home (every row, skipped ones included), always charged:
        a ``ledger`` argument may only be a ledger on the same home. A ledger file the store kept before the home is
        imported first (:mod:`privlin.ledger.migrate`)."""
        from .ledger import PrivacyLedger
        from .ledger.items import ItemLedger, label_of

        if self._ledger is None:
            if self.url is not None:
                led = PrivacyLedger.for_split(self.url, self.split.name)
            else:
                led = ItemLedger(self.split.item_bytes(), label=label_of("(no path)", self.split.name))
            self._ledger = led
        led = self._ledger
        if ledger is not None and not (isinstance(ledger, ItemLedger) and ledger.home.where == led.home.where):
            raise ValueError(f"a store split is charged on its items in the ledger home ({led.home.where}); the "
                             f"ledger passed ({ledger.where}) would bypass it")
        led = ItemLedger(led.scope, home=led.home.where, label=led.label, cap=cap,
                         neighbouring=led._requested_relation)
        self._record_backbone_training(led)
        return led

    def _record_backbone_training(self, led) -> None:
        """Charge, once, the DP training of the backbone on the items it read (featurize records it in the store).

        DP-MAE charges the home itself before its first step (entry ``ledger_entry`` of its record): then the items
        compose already. An entry this home lacks (trained under another home) is warned about; a record from before
        ledger homes is matched by dataset string and N and charged on these rows."""
        record = (self.store.attrs if self.store is not None else self.split.attrs).get("weights_privacy")
        if not record:
            return
        from .events import event_from_dict

        entry_id = record.get("ledger_entry") or "backbone-" + str(record["weights_sha256"])[:32]
        if any(r["kind"] == "entry" and r["body"].get("id") == entry_id for r in led.home.records()):
            return
        if not record.get("ledger_entry"):
            dataset = (self.store.attrs if self.store is not None else self.split.attrs).get("dataset")
            if record.get("dataset") != dataset or self.split.name != "train" or record.get("n") != self.n:
                return
        else:
            warnings.warn(f"the backbone's DP training ({str(record['weights_sha256'])[:12]}) has no entry in "
                          f"this ledger home ({led.home.where}) (trained under another home): its "
                          "budget is not composed with these rows'", PrivacyLeakWarning, stacklevel=4)
            return
        led.charge(event_from_dict(record["dp_event"]), mechanism="backbone DP training (DP-MAE)",
                   epsilon=float(record["epsilon"]), delta=float(record["delta"]), entry_id=entry_id,
                   params={"weights_sha256": record["weights_sha256"], "n": record["n"]},
                   neighbouring=record["neighbouring"])


def row_labels(y) -> np.ndarray:
    """The labels as an array, each as given: a sequence that NumPy would turn into text (one string among numbers)
    or refuse (one list among scalars) becomes an object array, so one row's label never changes how the others
    compare with the class list, nor raises (:func:`label_index` makes it a null row).  Arrays pass as they are;
    a column (n, 1) becomes (n,)."""
    if y is None:
        raise ValueError("labels y are required with feature arrays X (got y=None)")
    if not isinstance(y, np.ndarray) and not hasattr(y, "__array__"):
        try:
            arr = np.asarray(y)
        except (ValueError, TypeError):  # ragged: a sequence among scalars
            arr = None
        if arr is None or (arr.dtype.kind in "US" and not all(isinstance(v, (str, bytes)) for v in y)):
            items = list(y)
            arr = np.empty(len(items), dtype=object)
            for i, v in enumerate(items):
                arr[i] = v
        y = arr
    y = np.asarray(y)
    return y.reshape(-1) if y.ndim == 2 and y.shape[1] == 1 else y


def _process_count() -> int:
    import jax

    return jax.process_count()


def _process_index() -> int:
    import jax

    return jax.process_index()


def _shard_shares(n_shards: int, processes: int) -> list[range]:
    """Contiguous, as-equal-as-possible ranges of shards, one per process (row order is kept across processes)."""
    cuts = [round(i * n_shards / processes) for i in range(processes + 1)]
    return [range(cuts[i], cuts[i + 1]) for i in range(processes)]


def _split_url(split) -> str | None:
    """Local path or fsspec URL of the store a ``stores.Split`` belongs to."""
    store = split._group.store
    root = getattr(store, "root", None)  # zarr LocalStore
    if root is not None:
        return os.fspath(root)
    fs, path = getattr(store, "fs", None), getattr(store, "path", None)  # zarr FsspecStore
    if fs is not None and path is not None:
        return fs.unstrip_protocol(path)
    return None


def open_store(data):
    """``stores.open`` for a path or URL (``stores`` is imported only when a store is used)."""
    import stores

    return stores.open(data)


def is_store_like(data) -> bool:
    """Whether ``data`` is a source of rows with their labels (a Source, a store path or URL, a ``stores`` object)
    rather than a feature array: what lets ``fit(X)`` take a store without ``y``."""
    if isinstance(data, (Source, str)) or hasattr(data, "__fspath__"):
        return True
    return (type(data).__module__ or "").startswith("stores")


def as_source(data, split: str | None = "train") -> Source:
    """A :class:`Source` from a Source, ``(X, y)``, a ``stores.Split``, a ``stores.FeatureStore`` or a path/URL.

    ``split`` names the split of a store (a path/URL or ``FeatureStore``); it is ignored for a split or arrays.
    """
    if isinstance(data, Source):
        return data
    if isinstance(data, tuple) and len(data) == 2:
        return ArraySource(*data)
    if isinstance(data, (str, os.PathLike)):
        data = open_store(data)
    import stores

    if isinstance(data, stores.Split):
        return SplitSource(data)
    if isinstance(data, stores.FeatureStore):
        check_split(data, split)
        return SplitSource(data[split], data)
    raise TypeError(f"expected a store, a store path or URL, a stores.Split or an (X, y) pair, "
                    f"got {type(data).__name__}")


def public_classes(source: Source, classes=None, *, stacklevel: int = 3) -> tuple[np.ndarray, list[str]]:
    """The public class list (sorted) and the leaks it caused (see the module docstring for the policy).

    A list read from the private labels is read (and checked) before any charge (``privlin.workflow.plans_for``):
    its errors come with its PrivacyLeakWarning, never after a ledger entry.

    Raises
    ------
    ValueError
        Duplicates in a given list, fewer than 2 classes, or private labels that do not sort into a list.
    """
    leaks = []
    if classes is not None:
        given = np.asarray(classes)
        out = np.unique(given)
        if out.size != given.size:
            raise ValueError("classes contains duplicates")
        numeric, labels_numeric = _numeric(out.dtype.kind), _numeric(source.label_kind)
        if None not in (numeric, labels_numeric) and numeric != labels_numeric:  # every row would be a null row
            raise ValueError(f"classes are {'numbers' if numeric else 'strings'} but the labels are "
                             f"not ({out[:3].tolist()}... against labels of dtype kind {source.label_kind!r}); a "
                             "store's labels are class indices 0..K-1 (its names: store.attrs['classes'])")
    elif source.published_classes() is not None:
        out = np.arange(len(source.published_classes()))
    else:
        warnings.warn("classes inferred from the private labels: the class list is not covered by the privacy "
                      "guarantee; pass classes=... to avoid this", PrivacyLeakWarning, stacklevel=stacklevel)
        leaks.append("classes")
        try:
            out = np.unique(source.labels())
        except TypeError:  # labels of kinds that do not sort together (None among ints, ...)
            raise ValueError("the private labels are of types that cannot be ordered into a class list; pass "
                             "classes=...") from None
    if out.size < 2:
        raise ValueError(f"a classifier needs at least 2 classes; got {out.size} class: {out.tolist()}")
    return out, leaks


def _numeric(kind: str | None) -> bool | None:
    """True for a numeric dtype kind, False for text (str or bytes), None for anything else (object, unknown)."""
    return True if kind and kind in "biuf" else False if kind and kind in "US" else None


#: dtype kinds within which ``np.searchsorted`` orders labels exactly as ``==`` matches them.
_ORDERED_KINDS = ("biuf", "U", "S")


def label_index(classes: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Class index (int32) and a bool mask of the rows whose label is in ``classes``.

    A row whose label is not in the public list is a null row: it contributes nothing (zero-out), and no error
    reveals it.  It runs after the charge, so it never raises, whatever a row's label is.  Labels of a kind that sorts
    with the classes (numbers with numbers, text with text) are looked up by ``searchsorted``; any other (an object
    array holding a None or a string among ints, ...) is matched by equality (a dict lookup: ``1.0`` matches class
    ``1`` as it does there), and an unmatched or unhashable label is a null row.
    """
    classes, y = np.asarray(classes), np.asarray(y)
    if len(classes) and any(classes.dtype.kind in k and y.dtype.kind in k for k in _ORDERED_KINDS):
        idx = np.clip(np.searchsorted(classes, y), 0, len(classes) - 1)
        known = classes[idx] == y
    else:
        positions = {}
        for i, c in enumerate(classes.tolist()):
            positions.setdefault(c, i)
        idx = np.fromiter((_lookup(positions, v) for v in y.reshape(-1).tolist()), np.int64,
                          count=y.size).reshape(y.shape)
        known = idx >= 0
    return np.where(known, idx, 0).astype(np.int32), np.asarray(known, bool)


def _lookup(positions: dict, label) -> int:
    """The class position of one label, -1 where it matches none (or cannot be compared at all)."""
    try:
        return positions.get(label, -1)
    except Exception:  # noqa: BLE001 - an unhashable or uncomparable label is a null row, never an error
        return -1
