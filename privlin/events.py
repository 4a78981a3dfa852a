"""dp-accounting events as JSON data: the one codec (reports, ledgers and DP-MAE records share it).

An event read back is rebuilt from a fixed list of dp-accounting classes and numbers only: a file is data,
never code (``DpEvent.from_named_tuple`` would import any module a file names; we do not use it).
"""
from __future__ import annotations

import numbers
from typing import Any, Mapping

import attr
from dp_accounting import dp_event as _ev

__all__ = ["event_to_dict", "event_from_dict", "describe", "for_rows", "EVENT_CLASSES"]

#: Event classes a record may name.  Anything else is refused, never imported.
EVENT_CLASSES = {
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


def event_to_dict(event: _ev.DpEvent) -> dict:
    """``{"type": class name, <field>: value, ...}``, nested events as dicts, every leaf a number."""
    name = type(event).__name__
    if EVENT_CLASSES.get(name) is not type(event):
        raise TypeError(f"cannot record {type(event)!r}; supported: {sorted(EVENT_CLASSES)}")
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


def event_from_dict(data: Mapping) -> _ev.DpEvent:
    """The event :func:`event_to_dict` wrote; ``ValueError`` for anything else."""
    if not isinstance(data, Mapping) or "type" not in data:
        raise ValueError(f"not a serialised DpEvent: {data!r}")
    cls = EVENT_CLASSES.get(data["type"])
    if cls is None:
        raise ValueError(f"unknown DpEvent type {data['type']!r}; admitted: {sorted(EVENT_CLASSES)}")
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


def _number(value, name, exc=TypeError):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise exc(f"event field {name!r} must be a number, got {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    return float(value)


def describe(event: _ev.DpEvent) -> str:
    """A short human form: ``[Gaussian(σ=120), 100×Gaussian(σ=9.1)]``."""
    if isinstance(event, _ev.GaussianDpEvent):
        return f"Gaussian(σ={event.noise_multiplier:.4g})"
    if isinstance(event, _ev.LaplaceDpEvent):
        return f"Laplace(b={event.noise_multiplier:.4g})"
    if isinstance(event, _ev.SelfComposedDpEvent):
        return f"{event.count}×{describe(event.event)}"
    if isinstance(event, _ev.PoissonSampledDpEvent):
        return f"Poisson(q={event.sampling_probability:.3g}, {describe(event.event)})"
    if isinstance(event, _ev.ComposedDpEvent):
        return "[" + ", ".join(describe(e) for e in event.events) + "]"
    return type(event).__name__.replace("DpEvent", "")


def for_rows(event: _ev.DpEvent, rows: int) -> _ev.DpEvent:
    """The event that protects ``rows`` neighbouring rows at once (one image stored in ``rows`` rows), where that is
    exact: a Gaussian sum whose bound holds per row moves by at most ``rows`` bounds, so its noise multiplier is
    divided by ``rows``; compositions map over their parts; a no-op or non-private event is unchanged.  Anything else
    (subsampled, Laplace, ...) is a ValueError: its group guarantee is not computed here."""
    rows = int(rows)
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    if rows == 1 or isinstance(event, (_ev.NoOpDpEvent, _ev.NonPrivateDpEvent)):
        return event
    if isinstance(event, _ev.GaussianDpEvent):
        return _ev.GaussianDpEvent(event.noise_multiplier / rows)
    if isinstance(event, _ev.ComposedDpEvent):
        return _ev.ComposedDpEvent([for_rows(e, rows) for e in event.events])
    if isinstance(event, _ev.SelfComposedDpEvent):
        return _ev.SelfComposedDpEvent(for_rows(event.event, rows), event.count)
    raise ValueError(f"the guarantee of {type(event).__name__} for an item held in {rows} rows is not computed "
                     "here; remove the duplicate copies")
