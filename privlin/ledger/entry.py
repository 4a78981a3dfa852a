"""One ledger entry: a mechanism run on a private split, as a dp-accounting event."""
from __future__ import annotations

import datetime as _dt
import json
import math
import uuid
from dataclasses import dataclass, field
from typing import Mapping

from dp_accounting import dp_event as _ev

from ..events import event_from_dict, event_to_dict

__all__ = ["LedgerEntry", "json_float", "jsonable"]


@dataclass(frozen=True)
class LedgerEntry:
    """One mechanism run on the split.

    Attributes
    ----------
    mechanism : str
        What ran, e.g. ``"DPLinearClassifier/sgd"`` or ``"privlin.selection/report_noisy_max"``.
    event : dp_accounting.DpEvent
        The mechanism as accounted (σ, q, steps).
    epsilon, delta : float
        The mechanism's own guarantee as claimed by its caller.
    neighbouring : str
        dp-accounting's relation name.
    params : dict
        Free JSON metadata (hyper-parameters, whether the noise was seeded, ...).  Never a key or seed.
    id, time : str
        Unique id and UTC time of recording.
    """

    mechanism: str
    event: _ev.DpEvent
    epsilon: float
    delta: float
    neighbouring: str
    params: dict = field(default_factory=dict)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    time: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "time": self.time,
            "mechanism": self.mechanism,
            "neighbouring": self.neighbouring,
            "epsilon": json_float(self.epsilon),
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
                neighbouring=str(d["neighbouring"]),
                params=dict(d.get("params") or {}),
                id=str(d["id"]),
                time=str(d.get("time", "")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed ledger entry {d!r}: {exc}") from None


def json_float(x: float):
    x = float(x)
    return x if math.isfinite(x) else ("inf" if x > 0 else "nan")


def jsonable(params: dict) -> dict:
    """``params`` as plain JSON data (NumPy scalars and small arrays converted); ``ValueError`` otherwise."""
    try:
        return json.loads(json.dumps(params, allow_nan=False, default=_default))
    except (TypeError, ValueError) as exc:
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
