"""The ledger home: one place, outside every store, where charges on items are recorded.

A home holds a log of records (charges and caps), each on a set of items, hash-chained (every record carries the
sha256 of its content and of the record before, so an edit anywhere breaks the chain: :class:`LedgerDamaged`), and
the item sets themselves, content-addressed (stored once under the sha256 of their sorted 16-byte items, so a set
read by a thousand fits is stored once).

Where (:func:`location`): ``$PRIVLIN_LEDGER_HOME`` when set (a folder, a ``.sqlite`` file, or a URL such as
``s3://bucket/prefix`` for a team), else ``$XDG_DATA_HOME/privlin/ledger.sqlite`` (``~/.local/share/privlin``).

Backends: :class:`SqliteHome` (the default: a write transaction, ``BEGIN IMMEDIATE``, holds the cap check and the
charge, so concurrent charges serialise and a kill inside one leaves the home as before it) and
:class:`ObjectHome` (a log document and set objects behind a URL; on S3 the existing conditional-write lease of
:class:`privlin.ledger.storage.S3Object` serialises writers across machines).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
from typing import Iterator

import numpy as np

from . import storage

__all__ = ["location", "open_home", "ItemSet", "SqliteHome", "ObjectHome", "ENV"]

ENV = "PRIVLIN_LEDGER_HOME"
FORMAT = "privlin.ledger-home/1"
ITEM_BYTES = 16


def location(where: str | os.PathLike | None = None) -> str:
    """The home in force: ``where``, else ``$PRIVLIN_LEDGER_HOME``, else the user's data directory."""
    where = where if where is not None else os.environ.get(ENV) or None
    if where is None:
        base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
        return os.path.join(base, "privlin", "ledger.sqlite")
    where = os.fspath(where)
    if "://" in where and not where.startswith("file://"):
        return storage.canonical(where).rstrip("/")
    path = os.path.abspath(os.path.expanduser(where[len("file://"):] if where.startswith("file://") else where))
    return path if path.endswith((".sqlite", ".db")) else os.path.join(path, "ledger.sqlite")


_OPEN: dict[str, object] = {}
_OPEN_GUARD = threading.Lock()


def open_home(where: str | os.PathLike | None = None, *, timeout: float = 60.0):
    """The home at ``where`` (see :func:`location`), one handle per location in this process (keyed by the process
    id too: a forked child opens its own, since a parent's S3 client is not fork-safe)."""
    loc = location(where)
    key = f"{os.getpid()}:{loc}"
    with _OPEN_GUARD:
        if key not in _OPEN:
            _OPEN[key] = ObjectHome(loc, timeout) if "://" in loc else SqliteHome(loc, timeout)
        return _OPEN[key]


class LedgerDamaged(ValueError):
    """The ledger does not match its hash chain (or its anchor in a store): nothing is charged or read."""


class ItemSet:
    """A set of items: sorted, unique 16-byte values (``S16``), the sha256 that names it, and the most rows any one
    item filled in the array it was made from (``rows_per_item``: byte-identical copies of one image)."""

    __slots__ = ("values", "key", "rows_per_item")

    def __init__(self, values: np.ndarray, key: str, rows_per_item: int = 1):
        self.values, self.key, self.rows_per_item = values, key, int(rows_per_item)

    @classmethod
    def of(cls, items) -> "ItemSet":
        """The set of ``items`` (32-hex-character strings, or their ASCII bytes ``S32`` as ``Split.item_bytes`` gives
        them; ``stores.items``); one line naming a malformed one."""
        from stores.items import ITEM_CHARS, check

        arr = np.asarray(items)
        if arr.ndim == 1 and arr.dtype == f"S{ITEM_CHARS}":
            chars = arr.view(np.uint8).reshape(-1, ITEM_CHARS)
        else:
            if arr.ndim != 1 or arr.dtype.kind != "U" or arr.dtype.itemsize > 4 * ITEM_CHARS:
                arr = check(arr.astype(str) if arr.dtype.kind == "S" else arr)  # any other spelling, or the error
            try:
                chars = arr.astype(f"S{ITEM_CHARS}").view(np.uint8).reshape(-1, ITEM_CHARS)
            except UnicodeEncodeError:
                check(arr)
                raise
        nibbles = _HEX[chars]
        if (nibbles == 255).any():
            check(arr.astype(str) if arr.dtype.kind == "S" else arr)
            raise ValueError("items must be lowercase hex")  # pragma: no cover - check() names the row
        raw = np.ascontiguousarray((nibbles[:, 0::2] << 4) | nibbles[:, 1::2])
        values = np.sort(raw.view(f"S{ITEM_BYTES}").ravel())
        most = 1
        if values.size > 1:
            starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
            most = int(np.diff(np.append(starts, values.size)).max())
            values = values[starts]
        return cls(values, cls.key_of(values), most)

    @staticmethod
    def key_of(values: np.ndarray) -> str:
        return hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()

    @classmethod
    def from_blob(cls, blob: bytes, key: str, where: str) -> "ItemSet":
        if len(blob) % ITEM_BYTES or hashlib.sha256(blob).hexdigest() != key:
            raise LedgerDamaged(f"ledger home {where}: item set {key[:16]} does not match its hash (damaged)")
        return cls(np.frombuffer(blob, dtype=f"S{ITEM_BYTES}"), key)

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def members(self, other: "ItemSet") -> np.ndarray:
        """Bool mask over ``self.values``: which of them ``other`` holds (exact: both sorted)."""
        if other.key == self.key:
            return np.ones(len(self), bool)
        if not len(other) or not len(self):
            return np.zeros(len(self), bool)
        at = np.minimum(np.searchsorted(other.values, self.values), len(other) - 1)
        return other.values[at] == self.values


_HEX = np.full(256, 255, np.uint8)  # ASCII code -> its hex digit's value, 255 for anything else
_HEX[np.frombuffer(b"0123456789abcdef", np.uint8)] = np.arange(16, dtype=np.uint8)


def chain(previous: str, record: dict) -> str:
    """sha256 of a record's content (kind, set, body) chained to the head before it."""
    body = json.dumps({"previous": previous, "kind": record["kind"], "set": record["set"], "body": record["body"]},
                      sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(body.encode()).hexdigest()


def verify(records: list[dict], where: str) -> list[dict]:
    """``records`` when each one's head matches its content and the head before it; else :class:`LedgerDamaged`."""
    head = ""
    for i, r in enumerate(records):
        try:
            ok = r["head"] == chain(head, r)
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise LedgerDamaged(f"ledger home {where} does not match its hash chain at record {i + 1} of "
                                     f"{len(records)}: edited or damaged; nothing is charged or read")
        head = r["head"]
    return records


class SqliteHome:
    """The home in one SQLite file: tables ``records`` (the chained log) and ``sets`` (content-addressed)."""

    def __init__(self, path: str, timeout: float):
        self.where, self.timeout = path, timeout
        self._local = threading.local()
        self._sets: dict[str, ItemSet] = {}

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            os.makedirs(os.path.dirname(self.where), exist_ok=True)
            conn = sqlite3.connect(self.where, timeout=self.timeout, isolation_level=None)
            with self._damage():
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute("CREATE TABLE IF NOT EXISTS records (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
                             "item_set TEXT NOT NULL, body TEXT NOT NULL, head TEXT NOT NULL)")
                conn.execute("CREATE TABLE IF NOT EXISTS sets (key TEXT PRIMARY KEY, n INTEGER NOT NULL, "
                             "items BLOB NOT NULL)")
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    @contextlib.contextmanager
    def _damage(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                raise TimeoutError(f"ledger home {self.where} stayed locked by another writer for "
                                   f"{self.timeout:g} s") from None
            raise LedgerDamaged(f"ledger home {self.where} is unreadable ({e}): damaged") from None
        except sqlite3.DatabaseError as e:
            raise LedgerDamaged(f"ledger home {self.where} is unreadable ({e}): damaged") from None

    def records(self) -> list[dict]:
        """Every record, oldest first, its chain verified."""
        with self._damage():
            rows = self._conn().execute("SELECT kind, item_set, body, head FROM records ORDER BY seq").fetchall()
        return verify([_record(self.where, *row) for row in rows], self.where)

    @contextlib.contextmanager
    def transaction(self) -> Iterator["_Txn"]:
        """A write transaction: the records read inside it are the latest, and what it appends is kept whole or
        not at all (a kill, an error, a refused charge)."""
        conn = self._conn()
        with self._damage():
            conn.execute("BEGIN IMMEDIATE")
        try:
            txn = _Txn(self.records(), self)
            yield txn
            with self._damage():
                head = txn.records[txn.first - 1]["head"] if txn.first else ""
                for r in txn.records[txn.first:]:
                    assert r["head"] == chain(head, r)
                    head = r["head"]
                    conn.execute("INSERT INTO records (kind, item_set, body, head) VALUES (?, ?, ?, ?)",
                                 (r["kind"], r["set"], json.dumps(r["body"], sort_keys=True), r["head"]))
                conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    def put_set(self, s: ItemSet) -> None:
        """Store ``s`` if absent (inside a transaction)."""
        with self._damage():
            self._conn().execute("INSERT OR IGNORE INTO sets (key, n, items) VALUES (?, ?, ?)",
                                 (s.key, len(s), s.values.tobytes()))
        self._sets.setdefault(s.key, s)

    def has_set(self, key: str) -> bool:
        with self._damage():
            return key in self._sets or self._conn().execute("SELECT 1 FROM sets WHERE key = ?", (key,)).fetchone() \
                is not None

    def get_set(self, key: str) -> ItemSet:
        if key not in self._sets:
            with self._damage():
                row = self._conn().execute("SELECT items FROM sets WHERE key = ?", (key,)).fetchone()
            if row is None:
                raise LedgerDamaged(f"ledger home {self.where}: item set {key[:16]} of a record is missing")
            self._sets[key] = ItemSet.from_blob(bytes(row[0]), key, self.where)
        return self._sets[key]


class ObjectHome:
    """The home behind a URL (``s3://bucket/prefix``, any fsspec URL): the log as one document ``log.json`` written
    under :mod:`privlin.ledger.storage`'s lock (on S3 a lease and ``If-Match`` writes), sets as objects
    ``sets/<sha256>`` written before the record that names them."""

    def __init__(self, url: str, timeout: float):
        import fsspec

        self.where = url
        self._doc = storage.backend(url + "/log.json", timeout)
        self.fs, self._root = fsspec.core.url_to_fs(url)
        self._sets: dict[str, ItemSet] = {}

    def _read(self) -> list[dict]:
        try:
            data = self._doc.read()
        except ValueError as e:
            raise LedgerDamaged(f"ledger home {self.where}: {e}") from None
        if data is None:
            return []
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("records"), list):
            raise LedgerDamaged(f"ledger home {self.where} (log.json) is not a ledger home log: damaged")
        return data["records"]

    def records(self) -> list[dict]:
        return verify(self._read(), self.where)

    @contextlib.contextmanager
    def transaction(self) -> Iterator["_Txn"]:
        with self._doc.locked():
            txn = _Txn(self.records(), self)
            yield txn
            if len(txn.records) > txn.first:
                self._doc.write({"format": FORMAT, "records": txn.records})

    def _set_path(self, key: str) -> str:
        return f"{self._root.rstrip('/')}/sets/{key}"

    def put_set(self, s: ItemSet) -> None:
        path = self._set_path(s.key)
        if not self.fs.exists(path):  # content-addressed: a concurrent writer writes the same bytes
            self.fs.pipe_file(path, s.values.tobytes())
        self._sets.setdefault(s.key, s)

    def has_set(self, key: str) -> bool:
        return key in self._sets or self.fs.exists(self._set_path(key))

    def get_set(self, key: str) -> ItemSet:
        if key not in self._sets:
            try:
                blob = self.fs.cat_file(self._set_path(key))
            except FileNotFoundError:
                raise LedgerDamaged(f"ledger home {self.where}: item set {key[:16]} of a record is "
                                         "missing") from None
            self._sets[key] = ItemSet.from_blob(blob, key, self.where)
        return self._sets[key]


def _record(where: str, kind: str, item_set: str, body: str, head: str) -> dict:
    try:
        return {"kind": kind, "set": item_set, "body": json.loads(body), "head": head}
    except ValueError:
        raise LedgerDamaged(f"ledger home {where}: a record is not JSON (damaged)") from None


class _Txn:
    """What a transaction sees (every record, latest first read under the lock) and appends."""

    def __init__(self, records: list[dict], home):
        self.records, self.first, self.home = list(records), len(records), home

    def append(self, kind: str, s: ItemSet, body: dict) -> dict:
        self.home.put_set(s)
        record = {"kind": kind, "set": s.key, "body": json.loads(json.dumps(body, allow_nan=False))}
        record["head"] = chain(self.records[-1]["head"] if self.records else "", record)
        self.records.append(record)
        return record
