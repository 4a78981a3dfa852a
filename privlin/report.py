"""What a fitted model tells its user about privacy: the report and the leak warning."""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Optional

from dp_accounting import dp_event as _ev

from .accounting import RELATION_NAMES, relation_label  # re-exported: callers import them from here
from .events import event_to_dict

__all__ = ["PrivacyLeakWarning", "PrivacyReport", "setting_leaks", "RELATION_NAMES", "relation_label"]

class PrivacyLeakWarning(UserWarning):
    """A data-dependent quantity (class list, norm bound, ...) was read from private data without noise.

    The (ε, δ) in the report does not cover it.  Pass the quantity as public input to avoid it.
    """


def setting_leaks(*, private: bool, delta: float, n: int, stacklevel: int = 2) -> list[str]:
    """Warn about settings that void a guarantee — ε = ∞ (the non-private baseline) and δ ≥ 1/N — and return
    them for the report.  Public facts only; every privlin trainer and DP-MAE call it."""
    import warnings

    if not private:
        warnings.warn("epsilon=inf is the NON-PRIVATE baseline: no noise, no privacy guarantee",
                      PrivacyLeakWarning, stacklevel=stacklevel + 1)
        return ["everything (epsilon=inf, non-private baseline)"]
    if delta >= 1.0 / n:
        warnings.warn(f"delta={delta:g} >= 1/N = {1.0 / n:.3g}: a mechanism that publishes one random row outright "
                      f"meets such a guarantee; choose delta << 1/N", PrivacyLeakWarning, stacklevel=stacklevel + 1)
        return [f"delta={delta:g} >= 1/N (guarantee meaningless)"]
    return []


@dataclasses.dataclass(frozen=True)
class PrivacyReport:
    """The guarantee of one fit, and everything needed to re-derive it.

    Attributes
    ----------
    epsilon, delta : float
        The (ε, δ)-DP guarantee of the released model, as computed by ``accountant``.
    noise_multipliers : dict[str, float]
        σ of each mechanism, e.g. ``{"center": 120.0, "step": 9.1}`` (noise std is σ·sensitivity).
    steps : int
        Training steps T (1 for ``adam1``).
    sample_rate : float
        Poisson sampling rate q of each step (1.0: full batch).
    accountant : str
        ``"gdp"`` (exact full-batch composition), ``"pld"`` or ``"rdp"`` (dp-accounting).
    neighbouring : str
        dp-accounting's relation: ``"replace_special"`` (zero-out: one example replaced by a null one; N public)
        or ``"replace_one"`` (substitution); printed as :func:`relation_label` says.
    seeded : bool
        True when the noise came from a user-given seed (reproducible, so not secret).
    dp_event : dp_accounting.DpEvent
        The composed event; feed it to any dp-accounting accountant or a ledger.
    clip : float
        Per-example gradient norm bound C (and row norm of the preprocessing).
    method : str
    n_rows : int
        Rows of the private split N (public under the neighbouring relation; null rows included).
    leaks : tuple of str
        Quantities read from the data without privacy (each raised a PrivacyLeakWarning).
    secure_mode : bool
        Noise was the discrete Gaussian on a power-of-two grid from ``os.urandom`` (``privlin.secure_noise``).
    data : str
        The rows the guarantee is about (``"store PATH, split 'train'"`` or ``"arrays"``).
    ledger : str or None
        The ledger this fit was charged on.
    ledger_spent : (float, float) or None
        Total (ε, δ) spent on that ledger after this fit (every mechanism ever charged there, composed).
    chosen_by : str or None
        The model was chosen by a private search (``PrivateGridSearchCV``'s refit): then ``epsilon``, ``delta`` and
        ``dp_event`` are the whole search's, and this says so (and what the refit alone cost).
    """

    epsilon: float
    delta: float
    noise_multipliers: dict
    steps: int
    sample_rate: float
    accountant: str
    neighbouring: str
    seeded: bool
    dp_event: _ev.DpEvent
    clip: float = 1.0
    method: str = ""
    n_rows: int = 0
    leaks: tuple = ()
    learning_rate: float = float("nan")
    notes: Optional[str] = None
    secure_mode: bool = False
    data: str = ""
    ledger: Optional[str] = None
    ledger_spent: Optional[tuple] = None
    chosen_by: Optional[str] = None

    def to_dict(self) -> dict:
        """JSON-ready dict (the event as dp-accounting's named-tuple form)."""
        d = dataclasses.asdict(self)
        d["dp_event"] = event_to_dict(self.dp_event)
        d["noise_multipliers"] = {k: (v if math.isfinite(v) else "inf") for k, v in self.noise_multipliers.items()}
        d["leaks"] = list(self.leaks)
        if self.ledger_spent is not None:
            d["ledger_spent"] = [v if math.isfinite(v) else "inf" for v in self.ledger_spent]
        return d

    def __str__(self) -> str:
        sig = ", ".join(f"{k}={v:.4g}" for k, v in self.noise_multipliers.items())
        head = ("NON-PRIVATE baseline (epsilon=inf): no privacy guarantee" if math.isinf(self.epsilon) else
                f"({self.epsilon:.4g}, {self.delta:.3g})-DP, {relation_label(self.neighbouring)} neighbours, "
                f"{self.accountant} accountant")
        lines = [head + (f" on {self.data}" if self.data else "") + f" (N={self.n_rows})",
                 f"method={self.method} steps={self.steps} sample_rate={self.sample_rate:g} clip={self.clip:g} "
                 f"noise multipliers: {sig}",
                 "noise: seeded (reproducible, not secret)" if self.seeded else
                 "noise: discrete Gaussian from os.urandom (secure_mode)" if self.secure_mode else
                 "noise: OS-entropy seeded"]
        if self.chosen_by:
            lines.append(f"chosen by {self.chosen_by}")
        if self.leaks:
            lines.append("NOT covered (read without privacy): " + ", ".join(self.leaks))
        if self.ledger_spent is not None:
            why = ("" if math.isfinite(self.ledger_spent[0]) else
                   "; ∞: a release without noise read them (e.g. a k-NN baseline), or the entries' δ add past this"
                   " δ: the ledger's entries name it")
            lines.append(f"ledger {self.ledger}: total spent on these rows ε={self.ledger_spent[0]:.4g} at "
                         f"δ={self.ledger_spent[1]:.3g} (every mechanism charged there, composed{why})")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)
