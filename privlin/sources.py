"""Row sources for the trainers: in-memory arrays or a feature-store split, read in blocks.

Why: the same fit code must run on a NumPy array and on a store split larger
than memory.  A source yields ``(X, y)`` blocks in row order; the fit decides
whether to keep the preprocessed rows on device or to stream every pass.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

__all__ = ["ArraySource", "StoreSource"]


class ArraySource:
    """Rows already in memory.

    Parameters
    ----------
    X : ndarray (n, d) float
    y : ndarray (n,)
    """

    in_memory = True

    def __init__(self, X: np.ndarray, y: np.ndarray):
        self.X, self.y = X, y
        self.n, self.dim = X.shape

    def labels(self) -> np.ndarray:
        return self.y

    def blocks(self, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for start in range(0, self.n, rows):
            yield self.X[start:start + rows], self.y[start:start + rows]


class StoreSource:
    """A split of a :mod:`stores` feature store, streamed with ``split.blocks`` (bounded memory).

    Parameters
    ----------
    split : stores.Split
    """

    in_memory = False

    def __init__(self, split):
        self.split = split
        self.n = len(split)
        self.dim = split.dim

    def labels(self) -> np.ndarray:
        """Labels of the valid rows (N int64s: small next to the features)."""
        return np.asarray(self.split.labels[:])[self.split.valid_mask()]

    def blocks(self, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for X, y in self.split.blocks(rows=rows):
            if not np.all(np.isfinite(X)):
                raise ValueError(f"split {self.split.name!r} holds NaN or infinite features")
            yield X, y
