"""The private releases a fit can make before training, each one value (:class:`privlin.releases.base.Release`),
in one registry (:data:`REGISTRY`, :func:`register`): built-in and added releases alike.

Each release decides from public facts whether it is made (:meth:`Release.share`), holds its maths, says how
later rows use its value (:meth:`Release.map_rows`) and runs right after the release its :attr:`Release.after`
names (:func:`run_order`).  The registry's order is the order in which the plan asks them (a later release may
read the shares of the earlier ones: the curvature release weighs the budget left to training); the built-in
ones: the centering (:mod:`.center`), the row norm (:mod:`.radius`), the scaling stage's moments
(:mod:`.moments`) and whitening (:mod:`.whiten`), the re-centering rounds (:mod:`.recenter`), the curvature
(:mod:`.curvature`), and the public subspace (:mod:`.project`: only ever given from public rows).  They run in
the order :data:`ORDER`.  Adding a release is a module and one ``register(...)`` line.
"""
from __future__ import annotations

from .base import Facts, Release
from .center import Centering
from .curvature import CURVATURE, Curvature
from .moments import MOMENTS, Moments
from .project import PROJECT, Projection
from .radius import RADIUS, Radius
from .recenter import Recentering
from .stage import scaling_stage
from .whiten import WHITEN, Whitening

__all__ = ["Release", "Facts", "Radius", "Recentering", "Centering", "Moments", "Whitening", "Curvature", "Projection",
           "RADIUS", "MOMENTS", "WHITEN", "CURVATURE", "PROJECT", "REGISTRY", "register", "run_order", "ORDER",
           "BUILT_IN", "scaling_stage"]

#: Every registered release, in the order the plan asks them for their share.
REGISTRY: tuple = ()


def register(release: Release) -> Release:
    """Add ``release`` to :data:`REGISTRY`: every plan made afterwards asks it for its share, and it runs right
    after the release its ``after`` names (:func:`run_order`).  Names are unique."""
    global REGISTRY
    if not release.name or any(r.name == release.name for r in REGISTRY):
        raise ValueError(f"a release needs a name no registered release has; got {release.name!r}")
    REGISTRY = (*REGISTRY, release)
    return release


def run_order(registered=None) -> tuple:
    """The registered releases in the order they run: each right after the release its ``after`` names (None:
    first), a release registered later nearer to it than one registered earlier."""
    pending, order = list(REGISTRY if registered is None else registered), []
    while pending:
        placed = [r for r in pending if r.after is None or any(o.name == r.after for o in order)]
        if not placed:
            raise ValueError(f"releases {[r.name for r in pending]} run after releases that are not registered: "
                             f"{sorted({r.after for r in pending})}")
        for r in placed:
            at = 0 if r.after is None else next(i for i, o in enumerate(order) if o.name == r.after) + 1
            order.insert(at if r.after is not None else len(order), r)
        pending = [r for r in pending if r not in placed]
    return tuple(order)


for _release in (Centering(), RADIUS, MOMENTS, WHITEN, Recentering(), CURVATURE, PROJECT):
    register(_release)

#: The built-in releases' names, in the order they run (the ledger entry lists each one's σ, None where not made).
ORDER = tuple(r.name for r in run_order())
BUILT_IN = ORDER
