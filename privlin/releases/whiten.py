"""The scaling stage's second release (:func:`privlin.scaling.release_rotation`): the upper triangle of the
standardized rows' second moment (sensitivity 1: a unit row's outer product has Frobenius norm 1)."""
from __future__ import annotations

import dataclasses

from .base import Release

__all__ = ["Whitening", "WHITEN"]


@dataclasses.dataclass(frozen=True)
class Whitening(Release):
    name = "whiten"


WHITEN = Whitening()
