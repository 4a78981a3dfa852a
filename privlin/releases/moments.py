"""The scaling stage's first release (:func:`privlin.scaling.release_moments`): per-dimension sums of z and z⊙z
of the centered unit rows, released together (L2 sensitivity √2)."""
from __future__ import annotations

import dataclasses
import math

from .base import Release

__all__ = ["Moments", "MOMENTS"]


@dataclasses.dataclass(frozen=True)
class Moments(Release):
    name = "scale"

    def secure(self, plan, sigma):
        return math.sqrt(2.0) * sigma, math.sqrt(2.0), float(plan.n)


MOMENTS = Moments()
