"""What every ledger shares: entries composed at a δ, checked against a cap that a charge may set or lower but never
raise. :class:`privlin.ledger.core.PrivacyLedger` (a ledger file or memory) and
:class:`privlin.ledger.items.ItemLedger` (items in the ledger home) build on it; neither needs the other."""
from __future__ import annotations

import datetime as _dt
import math
from typing import Sequence

from dp_accounting import dp_event as _ev

from .. import accounting
from ..accounting import relation_label
from .entry import LedgerEntry

__all__ = ["PrivacyBudgetExceeded", "Ledger", "check_cap", "now"]


class PrivacyBudgetExceeded(RuntimeError):
    """A mechanism would push a split's total ε past its cap; nothing was read."""


def check_cap(cap) -> tuple[float, float] | None:
    """``cap`` as ``(epsilon, delta)`` floats, or None; ``ValueError`` for anything else (an infinite ε included:
    it would cap nothing, and a stored cap is a finite number)."""
    if cap is None:
        return None
    try:
        eps, delta = (float(c) for c in cap)
    except (TypeError, ValueError):
        raise ValueError(f"cap must be (epsilon, delta), got {cap!r}") from None
    if not (0 <= eps < math.inf and 0 < delta < 1):  # an infinite ε caps nothing: say so, do not store it
        raise ValueError(f"cap must have a finite epsilon >= 0 and 0 < delta < 1 (no cap: None), got {cap!r}")
    return (eps, delta)


def now() -> str:
    """The time a record is written, UTC to the second."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Ledger:
    """The part of a ledger that composes and checks: subclasses say where entries and caps are stored (``where``,
    ``cap``, ``entries``, ``charge``...); a handle's requested cap (``_requested_cap``) is applied at its next
    charge."""

    _requested_cap: tuple[float, float] | None = None

    def request_cap(self, cap) -> "Ledger":
        """Ask for ``cap`` at the next charge (it may set or lower the stored cap, never raise it); returns self."""
        if cap is not None:
            self._requested_cap = check_cap(cap)
        return self

    def __len__(self) -> int:
        return len(self.entries)

    def events(self) -> list[_ev.DpEvent]:
        return [e.event for e in self.entries]

    def _summary_head(self, rel: str, entries: Sequence[LedgerEntry]) -> list[str]:
        """The summary's first lines, shared by every ledger: the relation, where the ledger is (a line of its own:
        a path can be long), then one short line per entry (its mechanism, ε, δ and its σ's as a count and range;
        each σ in ``--json``)."""
        lines = [f"privacy ledger  [{relation_label(rel)} neighbours]", f"  {self.where}"]
        if not entries:
            lines.append("  (no mechanisms recorded)")
        for i, e in enumerate(entries):
            lines.append(f"  {i + 1:3d}  {e.time}  {e.mechanism:<34s} ε={e.epsilon:<8.4g} δ={e.delta:<8.2g}"
                         f"{_sigma_range(e.event)}".rstrip())
        return lines

    def default_delta(self, entries: Sequence[LedgerEntry] | None = None, cap=None) -> float:
        """The δ every total is reported at: the cap's δ, else the smallest positive δ of the entries (0 when none).

        Never their sum: a total at a larger δ than one of its own entries would read smaller than that entry's ε.
        """
        cap = self.cap if cap is None else cap
        if cap is not None:
            return cap[1]
        entries = self.entries if entries is None else entries
        return min((e.delta for e in entries if e.delta > 0), default=0.0)

    @staticmethod
    def _compose(entries: Sequence[LedgerEntry], delta: float, relation: str) -> float:
        for e in entries:
            if e.neighbouring != relation:
                raise ValueError(f"ledger entry {e.id} ({e.mechanism}) is under {relation_label(e.neighbouring)} "
                                 f"neighbours, the ledger under {relation_label(relation)}: they do not compose")
        if not entries:
            return 0.0
        if delta <= 0 and not all(isinstance(e.event, (_ev.NoOpDpEvent, _ev.NonPrivateDpEvent)) for e in entries):
            raise ValueError("a total over Gaussian mechanisms needs delta > 0")  # (0 or ∞ need no δ)
        return accounting.compose_epsilon((e.event for e in entries), delta, neighbouring=relation)

    def _with(self, entries, event, mechanism, delta, relation) -> float:
        """ε at ``delta`` of ``entries`` and ``event`` composed."""
        return self._compose([*entries, LedgerEntry(mechanism, event, math.nan, 0.0, relation)], delta, relation)

    def _check(self, entries, event, mechanism, cap, relation) -> float:
        eps_cap, delta_cap = cap
        total = self._with(entries, event, mechanism, delta_cap, relation)
        if total > eps_cap * (1 + 1e-9):
            spent = self._compose(entries, delta_cap, relation)
            raise PrivacyBudgetExceeded(
                f"{mechanism} would bring the total to ε={total:.4g} at δ={delta_cap:g}, past the cap "
                f"ε={eps_cap:g} ({len(entries)} earlier entries already spent ε={spent:.4g} at δ={delta_cap:g}; "
                f"ledger: {self.where}). Nothing was read.")
        return total

    def _cap_after(self, stored) -> tuple[float, float] | None:
        """The cap once this handle's requested cap is applied: it may set or lower the ``stored`` one, never raise
        it."""
        asked = self._requested_cap
        if asked is None or asked == stored:
            return stored
        if stored is not None and (asked[0] > stored[0] or asked[1] > stored[1]):
            raise PrivacyBudgetExceeded(
                f"budget (ε={asked[0]:g}, δ={asked[1]:g}) is above the cap stored in {self.where} "
                f"(ε={stored[0]:g}, δ={stored[1]:g}); raising a cap is an explicit act: "
                f"PrivacyLedger({self.where!r}).set_cap(...). Nothing was read.")
        return asked

    def __deepcopy__(self, memo):
        # A ledger is a handle on shared state (a file, the home, or one in-memory history):
        # sklearn.clone must not fork it, or charges would land in a copy.
        return self


def _sigma_range(event) -> str:
    """An entry's Gaussian noise multipliers for its text line: ``σ=2``, or ``30 σ in 0.5–4.08`` for a sweep
    (every σ is in ``--json``); empty for an event with none."""
    sigmas: list[float] = []

    def walk(e):
        if isinstance(e, _ev.GaussianDpEvent):
            sigmas.append(float(e.noise_multiplier))
        elif isinstance(e, _ev.ComposedDpEvent):
            for inner in e.events:
                walk(inner)
        elif isinstance(e, (_ev.SelfComposedDpEvent, _ev.PoissonSampledDpEvent, _ev.SampledWithoutReplacementDpEvent,
                            _ev.SampledWithReplacementDpEvent)):
            walk(e.event)

    walk(event)
    if not sigmas:
        return ""
    low, high = min(sigmas), max(sigmas)
    if len(sigmas) == 1 or low == high:
        return f"σ={low:.4g}" + (f" ({len(sigmas)}×)" if len(sigmas) > 1 else "")
    return f"{len(sigmas)} σ in {low:.3g}–{high:.3g}"
