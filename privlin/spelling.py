"""The names a user types into a fit (a method, a parameter, a split), each checked here once, with its message.

``privlin.fit`` calls these before JAX and scikit-learn load, so a typo is answered at once; the plan
(:func:`privlin.plan.validate`), the data layer (:func:`privlin.data.as_source`), the sweep's settings and
``python -m privlin.ledger`` call the same functions, so a name is refused with the same words wherever it is
typed.  Imports only the standard library and :mod:`privlin.defaults`.
"""
from __future__ import annotations

import difflib
from typing import Iterable

from .defaults import METHODS, PARAMS

__all__ = ["check_method", "check_params", "check_split"]


def check_method(method) -> None:
    """Refuse a training method privlin does not have (:data:`privlin.defaults.METHODS`)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: privlin's methods are {', '.join(METHODS)}")


def check_params(names: Iterable[str], *, also: Iterable[str] = ()) -> None:
    """Refuse a keyword that is no :class:`DPLinearClassifier` parameter (nor one of ``also``), naming the closest
    one: the error scikit-learn would raise later, after the heavy imports, without the suggestion."""
    known = [*PARAMS, *also]
    unknown = [n for n in names if n not in known]
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else "see help(privlin.DPLinearClassifier) for the parameters"
        raise TypeError(f"unknown parameter {unknown[0]!r}: {hint}")


def check_split(store, split: str | None) -> None:
    """Refuse a split name ``store`` (anything with ``splits`` and ``url``, e.g. ``stores.FeatureStore``) lacks."""
    if split is None:
        raise ValueError(f"which split? the store has {store.splits}")
    if split not in store.splits:
        raise ValueError(f"no split {split!r} in {store.url!r}; splits: {store.splits}")
