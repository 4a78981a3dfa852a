"""A privacy budget ledger: what a private split has already paid.

Every mechanism run on a private split (fit, sweep, private centering, private
selection) is recorded as a dp-accounting event; the ledger composes all of
them with a privacy-loss-distribution (PLD) accountant into the total (ε, δ)
spent. A cap refuses a new mechanism *before* it reads any private row.

Where it lives
--------------
For a store at URL ``u`` and split ``s`` the ledger is the JSON file
``<u>/<s>/privacy_ledger.json``. Local files are appended under an exclusive
lock (``fcntl.flock`` on ``privacy_ledger.json.lock``) and written through a
temporary file and ``os.replace``, so concurrent writers lose no entry and a
crash leaves either the old or the new file, never half of one. Other fsspec
URLs (``memory://``, object stores) are written whole, serialised only within
this process. Arrays get an in-memory ledger that can be saved.

The file is data, never code: events are rebuilt from a fixed list of
dp-accounting event classes (``DpEvent.from_named_tuple`` would import any
module named in the file; we do not use it).

Command line: ``python -m privlin.ledger PATH`` prints the history and total.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import numbers
import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

import attr
import dp_accounting
from dp_accounting import dp_event as _ev
from dp_accounting.pld import pld_privacy_accountant

__all__ = [
    "LEDGER_FILENAME",
    "PrivacyBudgetExceeded",
    "LedgerEntry",
    "PrivacyLedger",
    "ledger_path",
    "ledger_for",
    "event_to_dict",
    "event_from_dict",
    "compose_epsilon",
]

LEDGER_FILENAME = "privacy_ledger.json"
_FORMAT = "privlin.ledger/1"

_RELATIONS = {
    "add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
}

# Event classes a ledger file may name. Anything else is rejected, never imported.
_EVENT_CLASSES = {
    cls.__name__: cls
    for cls in (
        _ev.NoOpDpEvent,
        _ev.NonPrivateDpEvent,
        _ev.GaussianDpEvent,
        _ev.LaplaceDpEvent,
        _ev.DiscreteLaplaceDpEvent,
        _ev.RandomizedResponseDpEvent,
        _ev.SelfComposedDpEvent,
        _ev.ComposedDpEvent,
        _ev.PoissonSampledDpEvent,
        _ev.SampledWithReplacementDpEvent,
        _ev.SampledWithoutReplacementDpEvent,
        _ev.SingleEpochTreeAggregationDpEvent,
        _ev.RepeatAndSelectDpEvent,
    )
}


class PrivacyBudgetExceeded(RuntimeError):
    """A mechanism would push a split's total ε past its cap; nothing was read."""


# --------------------------------------------------------------------------- events


def event_to_dict(event: _ev.DpEvent) -> dict:
    """Serialise a dp-accounting event to plain JSON data.

    Parameters
    ----------
    event : dp_accounting.DpEvent
        One of the supported event classes (Gaussian, Laplace, Poisson-sampled,
        self-composed, composed, ...), nested to any depth.

    Returns
    -------
    dict
        ``{"type": class name, <field>: value, ...}``; nested events are dicts.
    """
    name = type(event).__name__
    if _EVENT_CLASSES.get(name) is not type(event):
        raise TypeError(f"cannot record {type(event)!r} in a ledger; supported: {sorted(_EVENT_CLASSES)}")
    out: dict[str, Any] = {"type": name}
    for f in attr.fields(type(event)):
        value = getattr(event, f.name)
        if isinstance(value, _ev.DpEvent):
            value = event_to_dict(value)
        elif isinstance(value, (list, tuple)):
            value = [event_to_dict(v) if isinstance(v, _ev.DpEvent) else _number(v, f.name) for v in value]
        else:
            value = _number(value, f.name)
        out[f.name] = value
    return out


def _number(value, name, exc=TypeError):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise exc(f"event field {name!r} must be a number, got {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    return float(value)


def event_from_dict(data: Mapping) -> _ev.DpEvent:
    """Rebuild an event from :func:`event_to_dict` output.

    Only the event classes listed in this module are admitted and every leaf
    must be a number: a ledger file is data and is never evaluated.
    """
    if not isinstance(data, Mapping) or "type" not in data:
        raise ValueError(f"not a serialised DpEvent: {data!r}")
    cls = _EVENT_CLASSES.get(data["type"])
    if cls is None:
        raise ValueError(f"unknown DpEvent type {data['type']!r} in ledger; admitted: {sorted(_EVENT_CLASSES)}")
    names = {f.name for f in attr.fields(cls)}
    extra = set(data) - names - {"type"}
    if extra:
        raise ValueError(f"unexpected fields {sorted(extra)} for {cls.__name__}")
    kwargs = {}
    for name in names:
        if name not in data:
            raise ValueError(f"missing field {name!r} for {cls.__name__}")
        value = data[name]
        if isinstance(value, Mapping):
            value = event_from_dict(value)
        elif isinstance(value, list):
            value = [event_from_dict(v) if isinstance(v, Mapping) else _number(v, name, ValueError) for v in value]
        else:
            value = _number(value, name, ValueError)
        kwargs[name] = value
    return cls(**kwargs)


def compose_epsilon(
    events: Iterable[_ev.DpEvent],
    delta: float,
    *,
    neighboring_relation: str = "add_or_remove_one",
    value_discretization_interval: float = 1e-4,
) -> float:
    """ε at ``delta`` of all ``events`` composed by dp-accounting's PLD accountant.

    Returns ``inf`` when an event is non-private (σ = 0, ``NonPrivateDpEvent``),
    and 0 for an empty list.
    """
    acc = pld_privacy_accountant.PLDAccountant(
        _relation(neighboring_relation), value_discretization_interval=value_discretization_interval
    )
    n = 0
    for event in events:
        if not acc.supports(event):
            raise ValueError(f"the PLD accountant cannot compose {event!r} under {neighboring_relation}")
        acc.compose(event)
        n += 1
    if n == 0:
        return 0.0
    return max(0.0, float(acc.get_epsilon(delta)))


_ALIASES = {"add_remove": "add_or_remove_one", "substitute": "replace_one"}


def _canonical(name: str) -> str:
    """Ledger spelling of a relation; accepts privlin.accounting's 'add_remove'/'substitute'."""
    return _ALIASES.get(name, name)


def _relation(name: str):
    try:
        return _RELATIONS[_canonical(name)]
    except KeyError:
        raise ValueError(f"unknown neighbouring relation {name!r}; use one of {sorted(_RELATIONS)}") from None


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True)
class LedgerEntry:
    """One mechanism run on the split.

    Attributes
    ----------
    mechanism : str
        What ran, e.g. ``"privlin.fit/dp_adam"`` or ``"private_centering"``.
    event : dp_accounting.DpEvent
        The mechanism as accounted (σ, q, steps).
    epsilon, delta : float
        The mechanism's own guarantee as claimed by its caller.
    neighboring_relation : str
        ``"add_or_remove_one"`` (default) or ``"replace_one"``.
    params : dict
        Free JSON metadata (hyper-parameters, user seed or OS entropy, ...).
    id, time : str
        Unique id and UTC time of recording.
    """

    mechanism: str
    event: _ev.DpEvent
    epsilon: float
    delta: float
    neighboring_relation: str = "add_or_remove_one"
    params: dict = field(default_factory=dict)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    time: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "time": self.time,
            "mechanism": self.mechanism,
            "neighboring_relation": self.neighboring_relation,
            "epsilon": _json_float(self.epsilon),
            "delta": float(self.delta),
            "event": event_to_dict(self.event),
            "params": self.params,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> "LedgerEntry":
        try:
            return cls(
                mechanism=str(d["mechanism"]),
                event=event_from_dict(d["event"]),
                epsilon=float(d["epsilon"]),
                delta=float(d["delta"]),
                neighboring_relation=_canonical(str(d.get("neighboring_relation", "add_or_remove_one"))),
                params=dict(d.get("params") or {}),
                id=str(d["id"]),
                time=str(d.get("time", "")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed ledger entry {d!r}: {exc}") from None


def _json_float(x: float):
    x = float(x)
    return x if math.isfinite(x) else ("inf" if x > 0 else "nan")


# --------------------------------------------------------------------------- storage


def ledger_path(store_url: str, split: str) -> str:
    """Where the ledger of ``split`` of the store at ``store_url`` lives."""
    if not isinstance(split, str) or not split or "/" in split or split in (".", ".."):
        raise ValueError(f"split must be a plain name, got {split!r}")
    return str(store_url).rstrip("/") + "/" + split + "/" + LEDGER_FILENAME


_PROCESS_LOCKS: dict[str, threading.Lock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()


def _process_lock(key: str) -> threading.Lock:
    with _PROCESS_LOCKS_GUARD:
        return _PROCESS_LOCKS.setdefault(key, threading.Lock())


class _LocalFile:
    """A JSON file on local disk: flock for writers, os.replace for atomicity."""

    def __init__(self, path: str, timeout: float):
        self.path = os.path.abspath(os.path.expanduser(path))
        self.timeout = timeout

    def read(self) -> dict | None:
        try:
            with open(self.path, "r", encoding="utf-8") as fh:
                return json.load(fh)
        except FileNotFoundError:
            return None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with _process_lock(self.path):
            fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                _flock(fd, self.timeout, self.path)
                yield
            finally:
                os.close(fd)  # closing releases the flock

    def write(self, data: dict) -> None:
        d = os.path.dirname(self.path)
        fd, tmp = tempfile.mkstemp(prefix=".privacy_ledger.", suffix=".tmp", dir=d)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=1, allow_nan=False)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def _flock(fd: int, timeout: float, path: str) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX: in-process lock only
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not lock the privacy ledger {path} within {timeout} s") from None
            time.sleep(0.01)


class _FsspecFile:
    """A JSON file behind an fsspec URL; writes are serialised in-process only."""

    def __init__(self, url: str):
        import fsspec

        self.url = url
        self.fs, self.path = fsspec.core.url_to_fs(url)

    def read(self) -> dict | None:
        if not self.fs.exists(self.path):
            return None
        with self.fs.open(self.path, "rb") as fh:
            return json.loads(fh.read().decode("utf-8"))

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with _process_lock(self.url):
            yield

    def write(self, data: dict) -> None:
        blob = json.dumps(data, indent=1, allow_nan=False).encode("utf-8")
        with self.fs.open(self.path, "wb") as fh:
            fh.write(blob)


class _Memory:
    def __init__(self):
        self.data: dict | None = None
        self.lock = threading.Lock()

    def read(self):
        return self.data

    @contextlib.contextmanager
    def locked(self):
        with self.lock:
            yield

    def write(self, data):
        self.data = json.loads(json.dumps(data))


def _backend(path: str | None, timeout: float):
    if path is None:
        return _Memory()
    path = os.fspath(path)
    if "://" not in path or path.startswith("file://"):
        return _LocalFile(path[len("file://"):] if path.startswith("file://") else path, timeout)
    return _FsspecFile(path)


# --------------------------------------------------------------------------- ledger


class PrivacyLedger:
    """The privacy spent on one private split, composed by PLD.

    Parameters
    ----------
    path : str or None
        Ledger JSON file (local path or fsspec URL). ``None`` keeps it in
        memory (for arrays); :meth:`save` writes it out.
    cap : (float, float) or None
        Budget ``(epsilon, delta)``. :meth:`charge` raises
        :class:`PrivacyBudgetExceeded` when the composed total at ``delta``
        would pass ``epsilon``.
    neighboring_relation : {"add_or_remove_one", "replace_one"}
        Relation of every entry; entries under another relation are refused
        (their ε do not compose).
    lock_timeout : float
        Seconds to wait for another writer of a local ledger file.

    Notes
    -----
    Charge first, then read data: :meth:`charge` checks the cap and appends
    the entry in one locked step, so two concurrent fits cannot both slip
    under the cap. A fit that fails after charging stays charged (the safe
    side: its noise may already have been released).
    """

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        *,
        cap: tuple[float, float] | None = None,
        neighboring_relation: str = "add_or_remove_one",
        lock_timeout: float = 60.0,
    ):
        _relation(neighboring_relation)
        neighboring_relation = _canonical(neighboring_relation)
        self.path = None if path is None else os.fspath(path)
        self.cap = _check_cap(cap)
        self.neighboring_relation = neighboring_relation
        self._backend = _backend(self.path, lock_timeout)

    # -- construction -----------------------------------------------------------------
    @classmethod
    def in_memory(cls, *, cap=None, neighboring_relation="add_or_remove_one") -> "PrivacyLedger":
        """A ledger for in-memory arrays; :meth:`save` it to keep it."""
        return cls(None, cap=cap, neighboring_relation=neighboring_relation)

    @classmethod
    def for_split(cls, store_url: str | os.PathLike, split: str, **kwargs) -> "PrivacyLedger":
        """The ledger beside split ``split`` of the store at ``store_url``."""
        return cls(ledger_path(os.fspath(store_url), split), **kwargs)

    @classmethod
    def load(cls, path, **kwargs) -> "PrivacyLedger":
        """Open an existing ledger file (error if it does not exist)."""
        led = cls(path, **kwargs)
        if led._backend.read() is None:
            raise FileNotFoundError(f"no privacy ledger at {path}")
        return led

    # -- reading ----------------------------------------------------------------------
    @property
    def entries(self) -> list[LedgerEntry]:
        """All recorded entries, oldest first (re-read from storage)."""
        return _parse(self._backend.read(), self.path)

    def __len__(self) -> int:
        return len(self.entries)

    def events(self) -> list[_ev.DpEvent]:
        return [e.event for e in self.entries]

    def default_delta(self, entries: Sequence[LedgerEntry] | None = None) -> float:
        """The δ totals are reported at: the cap's δ, else the sum of entry δ's."""
        if self.cap is not None:
            return self.cap[1]
        entries = self.entries if entries is None else entries
        return min(sum(e.delta for e in entries), 0.5) if entries else 0.0

    def spent(self, delta: float | None = None) -> tuple[float, float]:
        """Total ``(epsilon, delta)`` paid so far, composed by PLD.

        Parameters
        ----------
        delta : float, optional
            δ at which to report ε; default :meth:`default_delta`.
        """
        entries = self.entries
        delta = self.default_delta(entries) if delta is None else float(delta)
        return self._compose(entries, delta), delta

    def _compose(self, entries: Sequence[LedgerEntry], delta: float) -> float:
        for e in entries:
            if e.neighboring_relation != self.neighboring_relation:
                raise ValueError(
                    f"ledger entry {e.id} ({e.mechanism}) is under {e.neighboring_relation!r}, "
                    f"the ledger under {self.neighboring_relation!r}: they do not compose"
                )
        if not entries:
            return 0.0
        if delta <= 0:
            raise ValueError("a total over Gaussian mechanisms needs delta > 0")
        return compose_epsilon((e.event for e in entries), delta, neighboring_relation=self.neighboring_relation)

    def projected(self, event: _ev.DpEvent, delta: float | None = None) -> tuple[float, float]:
        """Total ``(epsilon, delta)`` if ``event`` were run now."""
        entries = self.entries
        probe = LedgerEntry("probe", event, math.nan, 0.0, self.neighboring_relation)
        delta = self.default_delta(entries) if delta is None else float(delta)
        return self._compose([*entries, probe], delta), delta

    def check(self, event: _ev.DpEvent, *, mechanism: str = "mechanism") -> float:
        """Raise :class:`PrivacyBudgetExceeded` if ``event`` would pass the cap.

        Returns the projected total ε (at the cap's δ); without a cap, ``nan``.
        """
        if self.cap is None:
            return math.nan
        return self._check(self.entries, event, mechanism)

    def _check(self, entries, event, mechanism) -> float:
        eps_cap, delta_cap = self.cap
        probe = LedgerEntry(mechanism, event, math.nan, 0.0, self.neighboring_relation)
        total = self._compose([*entries, probe], delta_cap)
        if total > eps_cap * (1 + 1e-9):
            spent = self._compose(entries, delta_cap)
            where = self.path or "in-memory ledger"
            raise PrivacyBudgetExceeded(
                f"{mechanism} would bring the total to ε={total:.4g} at δ={delta_cap:g}, past the cap "
                f"ε={eps_cap:g} ({len(entries)} earlier entries already spent ε={spent:.4g}; ledger: {where}). "
                "Nothing was read."
            )
        return total

    # -- writing ----------------------------------------------------------------------
    def charge(
        self,
        event: _ev.DpEvent,
        *,
        mechanism: str,
        epsilon: float,
        delta: float,
        params: Mapping | None = None,
        check: bool = True,
    ) -> LedgerEntry:
        """Check the cap and record ``event`` in one locked step.

        Call this *before* the mechanism reads private data.

        Parameters
        ----------
        event : dp_accounting.DpEvent
            The mechanism exactly as it will run.
        mechanism : str
            Human-readable name, e.g. ``"privlin.fit/dp_adam"``.
        epsilon, delta : float
            The mechanism's own claimed guarantee (for the history).
        params : mapping, optional
            JSON-serialisable metadata kept with the entry.
        check : bool
            Enforce the cap (default ``True``).

        Returns
        -------
        LedgerEntry
            The recorded entry.
        """
        entry = LedgerEntry(
            mechanism=str(mechanism),
            event=event,
            epsilon=float(epsilon),
            delta=float(delta),
            neighboring_relation=self.neighboring_relation,
            params=_jsonable(dict(params or {})),
        )
        entry.to_dict()  # validate before locking
        with self._backend.locked():
            data = self._backend.read()
            entries = _parse(data, self.path)
            if check and self.cap is not None:
                self._check(entries, event, entry.mechanism)
            self._backend.write(_document([*entries, entry], data))
        return entry

    record = charge

    def extend(self, entries: Iterable[LedgerEntry]) -> None:
        """Append existing entries (e.g. merge an in-memory ledger); no cap check."""
        entries = list(entries)
        with self._backend.locked():
            data = self._backend.read()
            old = _parse(data, self.path)
            seen = {e.id for e in old}
            self._backend.write(_document([*old, *(e for e in entries if e.id not in seen)], data))

    def save(self, path: str | os.PathLike) -> "PrivacyLedger":
        """Append this ledger's entries to the ledger file at ``path``; returns that ledger."""
        other = PrivacyLedger(path, cap=self.cap, neighboring_relation=self.neighboring_relation)
        other.extend(self.entries)
        return other

    def to_dict(self) -> dict:
        return _document(self.entries, None)

    # -- display ----------------------------------------------------------------------
    def summary(self, delta: float | None = None) -> str:
        """The history, one line per entry, then the PLD total."""
        entries = self.entries
        lines = [f"privacy ledger: {self.path or '(in memory)'}  [{self.neighboring_relation}]"]
        if not entries:
            lines.append("  (no mechanisms recorded)")
        for i, e in enumerate(entries):
            lines.append(
                f"  {i + 1:3d}  {e.time}  {e.mechanism:<28s} ε={e.epsilon:<8.4g} δ={e.delta:<8.2g} {_describe(e.event)}"
            )
        delta = self.default_delta(entries) if delta is None else delta
        if entries:
            total = self._compose(entries, delta)
            lines.append(f"total (PLD composition of {len(entries)} entries): ε={total:.4g} at δ={delta:.3g}")
        if self.cap is not None:
            lines.append(f"cap: ε={self.cap[0]:g} at δ={self.cap[1]:g}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"PrivacyLedger({self.path!r}, cap={self.cap})"

    def __deepcopy__(self, memo):
        # A ledger is a handle on shared state (a file, or one in-memory history):
        # sklearn.clone must not fork it, or charges would land in a copy.
        return self


def _check_cap(cap):
    if cap is None:
        return None
    try:
        eps, delta = (float(c) for c in cap)
    except (TypeError, ValueError):
        raise ValueError(f"cap must be (epsilon, delta), got {cap!r}") from None
    if not (eps >= 0 and 0 < delta < 1):
        raise ValueError(f"cap must have epsilon >= 0 and 0 < delta < 1, got {cap!r}")
    return (eps, delta)


def _document(entries: Sequence[LedgerEntry], previous: dict | None) -> dict:
    doc = {"format": _FORMAT, "entries": [e.to_dict() for e in entries]}
    return doc


def _parse(data: dict | None, where) -> list[LedgerEntry]:
    if data is None:
        return []
    if not isinstance(data, Mapping) or data.get("format") != _FORMAT or not isinstance(data.get("entries"), list):
        raise ValueError(f"{where} is not a privlin ledger (format {_FORMAT})")
    return [LedgerEntry.from_dict(d) for d in data["entries"]]


def _jsonable(params: dict) -> dict:
    try:
        return json.loads(json.dumps(params, allow_nan=False, default=_default))
    except ValueError as exc:
        raise ValueError(f"ledger params must be JSON data: {exc}") from None


def _default(obj):
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray) and obj.size <= 64:
        return obj.tolist()
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    raise TypeError(f"not JSON data: {type(obj).__name__}")


def _describe(event: _ev.DpEvent) -> str:
    if isinstance(event, _ev.GaussianDpEvent):
        return f"Gaussian(σ={event.noise_multiplier:.4g})"
    if isinstance(event, _ev.LaplaceDpEvent):
        return f"Laplace(b={event.noise_multiplier:.4g})"
    if isinstance(event, _ev.SelfComposedDpEvent):
        return f"{event.count}×{_describe(event.event)}"
    if isinstance(event, _ev.PoissonSampledDpEvent):
        return f"Poisson(q={event.sampling_probability:.3g}, {_describe(event.event)})"
    if isinstance(event, _ev.ComposedDpEvent):
        return "[" + ", ".join(_describe(e) for e in event.events) + "]"
    return type(event).__name__.replace("DpEvent", "")


def _store_url(store) -> str | None:
    """Local path or fsspec URL of a zarr Store, if it has one."""
    root = getattr(store, "root", None)  # zarr LocalStore
    if root is not None:
        return os.fspath(root)
    fs, path = getattr(store, "fs", None), getattr(store, "path", None)  # zarr FsspecStore
    if fs is not None and path is not None:
        return fs.unstrip_protocol(path)
    return None


def ledger_for(data, split: str | None = None, *, cap=None, ledger: "PrivacyLedger | None" = None) -> "PrivacyLedger":
    """The ledger that pays for a mechanism run on ``data``.

    Parameters
    ----------
    data : stores.FeatureStore, stores.Split, str (store path or URL), or arrays
        A store split gets the ledger file beside it; anything else (arrays)
        gets a fresh in-memory ledger, unless ``ledger`` is given.
    split : str, optional
        Split name when ``data`` is a store or a store path.
    cap : (epsilon, delta), optional
        Budget to enforce (overrides ``ledger.cap`` when both are given).
    ledger : PrivacyLedger, optional
        Use this ledger (e.g. an in-memory one shared by several fits on arrays).
    """
    if ledger is not None:
        if cap is not None:
            ledger.cap = _check_cap(cap)
        return ledger
    if isinstance(data, (str, os.PathLike)):
        if split is None:
            raise ValueError("a store path needs the split name to find its ledger")
        return PrivacyLedger.for_split(os.fspath(data), split, cap=cap)
    if hasattr(data, "splits") and hasattr(data, "url"):  # stores.FeatureStore
        if split is None:
            raise ValueError(f"which split? the store has {list(data.splits)}")
        url = data.url if isinstance(data.url, (str, os.PathLike)) else _store_url(data.url)
        if url is None:
            raise ValueError("this store has no path or URL to keep a ledger beside; pass ledger=PrivacyLedger(path)")
        return PrivacyLedger.for_split(os.fspath(url), split, cap=cap)
    group = getattr(data, "_group", None)
    if group is not None and hasattr(data, "blocks"):  # stores.Split
        url = _store_url(group.store)
        if url is None:
            raise ValueError("this split's store has no path or URL to keep a ledger beside; "
                             "pass ledger=PrivacyLedger(path)")
        return PrivacyLedger.for_split(url, data.name, cap=cap)
    return PrivacyLedger.in_memory(cap=cap)


# --------------------------------------------------------------------------- CLI


def _resolve(path: str, split: str | None) -> list[str]:
    """Ledger files meant by PATH: a ledger file, a split, or a store (every split)."""
    if path.endswith(".json"):
        return [path]
    if split:
        return [ledger_path(path, split)]
    import fsspec

    fs, root = fsspec.core.url_to_fs(path)
    if fs.exists(root.rstrip("/") + "/" + LEDGER_FILENAME):
        return [path.rstrip("/") + "/" + LEDGER_FILENAME]
    found = []
    if fs.isdir(root):
        for child in sorted(fs.ls(root, detail=False)):
            name = child.rstrip("/").rsplit("/", 1)[-1]
            if fs.exists(child.rstrip("/") + "/" + LEDGER_FILENAME):
                found.append(ledger_path(path, name))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m privlin.ledger PATH [--split S] [--delta D] [--json]``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m privlin.ledger", description="Print a split's privacy history and total.")
    p.add_argument("path", help="a store, a store split, or a privacy_ledger.json file (local path or fsspec URL)")
    p.add_argument("--split", default=None, help="split name when PATH is a store")
    p.add_argument("--delta", type=float, default=None, help="δ for the total (default: sum of entry δ's)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = p.parse_args(argv)
    files = _resolve(args.path, args.split)
    if not files:
        print(f"no privacy ledger under {args.path}")
        return 1
    out = []
    for f in files:
        led = PrivacyLedger(f)
        if args.json:
            eps, delta = led.spent(args.delta)
            out.append({"path": f, "epsilon": _json_float(eps), "delta": delta, **led.to_dict()})
        else:
            print(led.summary(args.delta))
    if args.json:
        print(json.dumps(out if len(out) > 1 else out[0], indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
