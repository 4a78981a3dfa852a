"""Results people look at: noise draws aggregated to mean ± sd, in one unit (percent) for tables, CSVs and plots.

Why one module: the quickstart's table, its CSV and its plot once disagreed on units (fractions in the CSV, % in
the table) and on what a point was (a mean with no spread).  Everything shown is made from :func:`summarize`.
"""
from __future__ import annotations

import csv
import math
import os
from typing import Iterable, Mapping, Sequence

import numpy as np

__all__ = ["summarize", "write_csv"]


def summarize(rows: Iterable[Mapping], by: Sequence[str], keep: Sequence[str] = ()) -> list[dict]:
    """Mean and sample standard deviation of accuracy (%) over the rows sharing ``by`` (the noise draws).

    Parameters
    ----------
    rows : iterable of mapping
        Each with ``accuracy`` (a fraction, as privlin reports it) and the ``by`` and ``keep`` keys.
    by : sequence of str
        The keys of one point, e.g. ``("label", "epsilon")``.
    keep : sequence of str
        Keys copied from the group's first row (the same in every draw: achieved ε, σ, lr, ...).

    Returns
    -------
    list of dict
        One per group, in first-seen order: the ``by`` and ``keep`` keys, ``accuracy_pct``, ``sd_pct`` (None for
        a single draw) and ``draws``.
    """
    groups: dict[tuple, list[Mapping]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in by), []).append(r)
    out = []
    for key, members in groups.items():
        acc = 100 * np.asarray([m["accuracy"] for m in members], float)
        out.append({**dict(zip(by, key)), **{k: members[0][k] for k in keep}, "accuracy_pct": float(acc.mean()),
                    "sd_pct": float(acc.std(ddof=1)) if acc.size > 1 else None, "draws": int(acc.size)})
    return out


def write_csv(rows: Sequence[Mapping], path: str | os.PathLike) -> str:
    """Write ``rows`` (dicts with the same keys) as CSV; non-finite numbers as ``inf``/``nan``.  Returns the path."""
    if not rows:
        raise ValueError("no rows to write")

    def cell(v):
        return v if not isinstance(v, float) or math.isfinite(v) else str(v)

    path = os.fspath(path)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows({k: cell(v) for k, v in r.items()} for r in rows)
    return path
