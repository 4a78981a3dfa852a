"""The public subspace: rows projected onto the top principal directions of public rows, so that the releases after
it and the training work in ``rank`` dimensions instead of d'.

Why: every DP training step adds isotropic noise to all d' weights, while rows of a frozen backbone (or pixels of
small images) span far fewer directions; the noise in the directions the rows do not use costs accuracy and buys
nothing.  Public rows of the same kind name those directions for free (the ambient-dimension bypass of Zhou, Wu &
Banerjee, ICLR 2021; gradient embedding perturbation, Yu et al., ICLR 2021).  The basis is never released from
private rows: :meth:`Projection.share` is 0, so a plan makes it only where a public source gives it
(:mod:`privlin.public`), computed at σ = 0 on the public rows by the one runner.

The value is a :class:`Subspace`: ``basis`` (d', rank), orthonormal, the top eigenvectors of the second moment of
the public rows' directions as the releases before it leave them (normalized, with their radial coordinate,
centered by the public centre), and ``energy`` (rank,), the share of that second moment's trace each holds.  Later
rows are ``normalize(x @ basis)`` (:func:`privlin.releases.base.model_rows`); the rank is a public setting
(``public_rank``), resolved by :func:`choose_rank` from the public rows' spectrum where not given.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import scaling
from .base import Release, model_rows

__all__ = ["Subspace", "Projection", "PROJECT", "ENERGY", "choose_rank", "largest_rank", "projected_second_moment",
           "describe"]

#: The rule's share of the public rows' energy (the trace of their second moment) that the projection keeps: the
#: smallest rank whose top directions hold it (:func:`choose_rank`).
ENERGY = 0.995


class Subspace(NamedTuple):
    """The projection's value: ``basis`` (d', rank) float32 with orthonormal columns, in order of decreasing
    energy, and ``energy`` (rank,) float32: the share of the public rows' second-moment trace each column holds."""

    basis: jax.Array
    energy: jax.Array


def projected_second_moment(total, X, mask, rows, n, *, normalize):
    """``total`` + :func:`.scaling.second_moment_sum` of a chunk of rows as ``rows`` (the row map so far) leaves
    them, at norm 1."""
    return total + scaling.second_moment_sum(model_rows(X, rows, 1.0, normalize), mask, n)


def largest_rank(public_rows: int, dim: int) -> int:
    """The most directions ``public_rows`` rows of dimension ``dim`` can name: min(rows, dim)."""
    return max(1, min(int(public_rows), int(dim)))


def choose_rank(energy, public_rows: int, dim: int, share: float = ENERGY) -> int:
    """The rule's rank from the public rows' spectrum ``energy`` (each direction's share of the trace, decreasing):
    the smallest rank whose top directions hold ``share`` of it, at most :func:`largest_rank`.  Public rows only."""
    cum = np.cumsum(np.asarray(energy, np.float64))
    rank = int(np.searchsorted(cum, share * cum[-1] * (1 - 1e-12)) + 1) if cum.size and cum[-1] > 0 else 1
    return min(rank, largest_rank(public_rows, dim))


@dataclasses.dataclass(frozen=True)
class Projection(Release):
    """Rows projected onto a public subspace of ``rank`` directions; made only where given (share 0)."""

    rank: int = 0
    name = "project"
    after = "center"

    def share(self, facts):
        """0: the basis is never released from private rows, only given from public ones (:mod:`privlin.public`)."""
        return 0.0

    def given_as(self, facts):
        """The projection onto ``facts.projected`` directions (the resolved ``public_rank``)."""
        return Projection(int(facts.projected))

    def compute(self, driver, ctx, key, sigma):
        """The top ``rank`` eigenvectors of the exact second moment of the rows' directions as the releases before
        it left them.  Computed only on public rows at σ = 0 (it is never bought: :meth:`share`), so no noise."""
        M = driver.total("public subspace", jnp.zeros((ctx.model_dim,) * 2, jnp.float64), projected_second_moment,
                         ctx.row_map(), ctx.n, normalize=ctx.normalize)
        lam, vectors = jnp.linalg.eigh(M)
        top = jnp.argsort(-lam)[:self.rank]
        energy = jnp.maximum(lam[top], 0.0) / jnp.maximum(jnp.sum(jnp.maximum(lam, 0.0)), 1e-300)
        return Subspace(jnp.asarray(vectors[:, top], jnp.float32), jnp.asarray(energy, jnp.float32))

    def use(self, ctx, value):
        """Later releases and the model see ``rank`` inputs: the rows in the subspace."""
        ctx = super().use(ctx, value)
        return ctx._replace(model_dim=value.basis.shape[1])

    def map_rows(self, rows, value):
        """Later rows are projected onto the basis (and normalized again)."""
        return rows._replace(project=value.basis)

    def model_dim_after(self, dim: int) -> int:
        return self.rank

    def note(self, plan, sigma, value):
        return None if value is None else describe(value)


def describe(subspace: Subspace) -> str:
    """The report's sentence on a public subspace: its rank and the share of the public rows' energy it holds."""
    return (f"rows projected onto the public subspace of {np.shape(subspace.basis)[1]} directions holding "
            f"{100 * float(np.sum(np.asarray(subspace.energy, np.float64))):.3g}% of the public rows' energy")


PROJECT = Projection()
