"""The private releases a fit can make before training, each one value (:class:`privlin.releases.base.Release`).

:data:`ORDER` is the order they run in (and the order of the plan's chain): the row norm (:mod:`.radius`),
the re-centering rounds (:mod:`.recenter`), the centering (:mod:`.center`), the scaling stage's moments
(:mod:`.moments`) and whitening (:mod:`.whiten`), the curvature (:mod:`.curvature`).  :data:`ADDED` holds
further releases (none shipped): each chooses its own share from public facts (:meth:`Release.share`) and
runs right after the release it names (:attr:`Release.after`), through the same driver as the built-in ones
(:func:`privlin.runner.fit_chain`); adding one is a module and an entry here.
"""
from __future__ import annotations

from .base import Facts, Release
from .center import Centering
from .curvature import CURVATURE, Curvature
from .moments import MOMENTS, Moments, scaling_stage
from .radius import RADIUS, Radius
from .recenter import Recentering
from .whiten import WHITEN, Whitening

__all__ = ["Release", "Facts", "Radius", "Recentering", "Centering", "Moments", "Whitening", "Curvature", "RADIUS",
           "MOMENTS", "WHITEN", "CURVATURE", "ORDER", "ADDED", "BUILT_IN", "scaling_stage"]

#: The built-in releases' names in the order they run.
ORDER = ("radius", "recenter", "center", "scale", "whiten", "curvature")
#: Every built-in release's name (the ledger entry lists each one's σ, None where not made).
BUILT_IN = ORDER
#: Added releases (each after the built-in release its ``after`` names): empty in privlin itself.
ADDED: tuple = ()
