"""What every private release of a fit is: one value, described once (:class:`Release`).

Why: a release used to be described in six places (a plan field, a compiled ratio, a secure-mode row, a ledger key,
a report note, a model field); each new one touched them all.  Now the plan holds its chain of ``(release, σ)``
and derives the event, the ε, the secure-mode table, the ledger entry and the report's notes from it
(:mod:`privlin.plan`), and the runner walks it (:mod:`privlin.runner`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

from .. import accounting

__all__ = ["Release", "Facts", "planned_sigma"]


def planned_sigma(share: float, mu: float, relation) -> float:
    """σ of a Gaussian release spending ``share`` of the GDP budget μ² (1/σ² = share·μ², sensitivity doubled under
    ``replace_one``): the view in which the plan decides, before calibration, which releases to make."""
    return accounting.sensitivity_factor(relation) / (math.sqrt(share) * mu)


@dataclasses.dataclass(frozen=True)
class Facts:
    """The public facts a release decides from before calibration: N, the model's inputs d', the clip norm, the
    GDP budget μ (inf: the non-private baseline), the relation's sensitivity factor, secure mode."""

    n: int
    dim: int
    clip: float
    mu: float
    sensitivity_factor: float
    secure_mode: bool


@dataclasses.dataclass(frozen=True)
class Release:
    """One private release of a fit (a frozen, hashable value: it is part of what a compiled fit specializes on).

    Subclasses set :attr:`name` and override what they need; the defaults describe one Gaussian release of a sum
    of L2 sensitivity 1 (under zero-out neighbours; the accountant's relation doubles it under ``replace_one``).

    The contract, each from public facts only (the plan's settings and N, d, k), never a row:

    * :meth:`events` — the Gaussian noise multipliers as the release runs them (stages compose to one at σ).
    * :meth:`secure` — ``(noise std, L2 sensitivity, public bound on every entry)``: secure mode's table.
    * :meth:`note` — the report's sentence about the release, given its released value.
    * :attr:`ledger_key` — the ledger entry's parameter holding σ.
    * :attr:`adds_dims` — model inputs the release gives the rows (the radial coordinate: 1).

    A *generic* release (:attr:`generic`) is also run by the runner's one loop over the chain's head: its exact
    sum reads the rows as given (``init``, ``block_sum``), its value is drawn by :meth:`release`.  Added releases
    are generic and choose themselves with :meth:`share`.
    """

    name: ClassVar[str] = ""
    generic: ClassVar[bool] = False
    adds_dims: ClassVar[int] = 0

    @property
    def ledger_key(self) -> str:
        return f"sigma_{self.name}"

    def events(self, sigma: float) -> tuple[float, ...]:
        """σ of each Gaussian release as it runs (one: σ itself)."""
        return (sigma,)

    def secure(self, plan, sigma: float) -> tuple[float, float, float]:
        """Secure mode's ``(std, sensitivity, bound)``: a count-like sum (one row moves it by 1, every entry ≤ N)."""
        return sigma, 1.0, float(plan.n)

    def note(self, plan, sigma: float, value: Any) -> str | None:
        """The report's note on this release (None: nothing beyond its σ and share)."""
        return None

    # ---- added (generic) releases only
    def share(self, facts: Facts) -> float:
        """Share of the GDP budget μ² this release asks for, from public facts (0: not made)."""
        return 0.0

    def init(self, dim: int):
        """The zero accumulator of the exact block sum over rows of dimension ``dim`` (generic releases)."""
        raise NotImplementedError

    def block_sum(self, total, X, mask, n):
        """``total`` plus the exact sum over one block of rows as given (``mask`` 0: a null row); traced."""
        raise NotImplementedError

    def release(self, total, n, key, sigma, noisy=None):
        """The released value from the exact sum: Gaussian noise of std σ·sensitivity from ``key``, or ``noisy``
        (secure mode's discrete-Gaussian release of ``total``, drawn on the host) in its place; traced."""
        raise NotImplementedError
