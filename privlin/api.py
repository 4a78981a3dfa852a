"""``privlin.fit`` / ``privlin.evaluate``: DP linear probes straight from a feature store.

Why a separate entry point: a store split may be larger than memory.  ``fit``
streams ``split.blocks()`` (bounded memory: one block plus the model), keeps
the preprocessed rows on device only when they fit ``memory_limit``, and
returns the fitted :class:`~privlin.estimator.DPLinearClassifier` with its
privacy report.
"""
from __future__ import annotations

import numpy as np

from .estimator import DPLinearClassifier
from .sources import StoreSource

__all__ = ["fit", "evaluate", "open_split"]


def open_split(store, split: str):
    """``stores.Split`` from a store, a split, or a path/URL (``stores`` is imported lazily)."""
    if hasattr(store, "blocks") and hasattr(store, "dim"):
        return store
    if isinstance(store, (str, bytes)) or hasattr(store, "__fspath__"):
        import stores

        store = stores.open(store)
    return store[split]


def fit(data, eps: float = 8.0, split: str = "train", **params) -> DPLinearClassifier:
    """Fit a :class:`DPLinearClassifier` at privacy budget ``eps`` on a store split or arrays.

    Parameters
    ----------
    data : stores.FeatureStore, stores.Split, str/path/URL, or tuple (X, y)
        Where the private rows are.  A store is streamed in ``block_rows`` blocks.
    eps : float, default=8
        ε of the whole fit (``delta`` defaults to 1e-5; pass ``delta=`` to change it).
    split : str, default="train"
        Split to fit on when ``data`` is a store or a path.
    **params
        Any :class:`DPLinearClassifier` parameter (``classes=``, ``method=``, ``random_state=``, ...).

    Returns
    -------
    DPLinearClassifier
        Fitted; ``model.privacy_`` holds the guarantee.
    """
    model = DPLinearClassifier(epsilon=eps, **params)
    if isinstance(data, tuple) and len(data) == 2:
        return model.fit(*data)
    sp = open_split(data, split)
    model._validate_params()
    model.n_features_in_ = sp.dim
    return model._fit_source(StoreSource(sp))


def evaluate(model: DPLinearClassifier, data, split: str = "test", *, block_rows: int = 65536) -> float:
    """Accuracy of ``model`` on a store split (streamed) or on arrays ``(X, y)``."""
    if isinstance(data, tuple) and len(data) == 2:
        return float(model.score(*data))
    sp = open_split(data, split)
    right = total = 0
    for X, y in sp.blocks(rows=block_rows):
        right += int(np.sum(model.predict(X) == y))
        total += len(y)
    if total == 0:
        raise ValueError(f"split {split!r} has no rows")
    return right / total
