"""The privacy an experiment spent, in plain sight: this run's cost and the split's ledger total.

Why: rerunning an experiment charges its private split again, and a figure's "ε" is one model's guarantee, not
what producing the figure cost.  Every number here comes from privlin (a sweep's composed
``total_epsilon``, the split's :class:`privlin.ledger.PrivacyLedger`); nothing is recomputed.
"""
from __future__ import annotations

import math
import sys

import cliconv as cli

__all__ = ["earlier_entries", "ledger_total", "spent_line"]


def _ledger(store_url: str, split: str):
    from privlin.ledger import PrivacyLedger

    return PrivacyLedger.for_split(str(store_url), split)


def earlier_entries(store_url: str, split: str) -> int:
    """Mechanisms already charged to ``split`` (before this run); prints a note when there are some."""
    n = len(_ledger(store_url, split))
    if n:
        print(f"note: the images of {store_url} [{split}] already have {n} ledger entries (earlier runs, or another "
              f"store of the same images); this run is charged on top of them (see the total below)", file=sys.stderr)
    return n


def ledger_total(store_url: str, split: str, *, progress: bool = True) -> tuple[float, float, int]:
    """``(ε, δ, entries)`` the ledger of ``split`` has spent in total (PLD composition, privlin's own)."""
    led = _ledger(store_url, split)
    with cli.status(f"composing the ledger of {store_url} [{split}]", enabled=progress):
        eps, delta = led.spent()
    return eps, delta, len(led)


def _eps(e: float) -> str:
    return "∞ (a non-private release is on it)" if math.isinf(e) else f"{e:.4g}"


def spent_line(store_url: str, split: str, run_epsilon: float, run_delta: float, what: str, *,
               progress: bool = True) -> str:
    """One line: what this run charged to ``split`` and the ledger's total after it."""
    eps, delta, n = ledger_total(store_url, split, progress=progress)
    return (f"{store_url} [{split}]: this run ε={_eps(run_epsilon)} at δ={run_delta:g} ({what}); ledger total "
            f"ε={_eps(eps)} at δ={delta:g} over {n} entries")
