"""privlin: differentially private linear classifiers on frozen-backbone features.

    import privlin
    model = privlin.fit("feats.zarr", epsilon=8, classes=range(10))   # or privlin.fit(X, y, epsilon=1, ...)
    privlin.evaluate(model, "feats.zarr")                               # accuracy on the 'test' split
    print(model.privacy_)                                               # (ε, δ), σ's, data, ledger total

Each module imports only its own layer and those below it; the layers are stated once, in
``tests/test_layers.py``, the test that checks them.

The package imports lazily (PEP 562): ``import privlin.accounting`` or ``privlin.events`` loads neither JAX nor
scikit-learn (DP-MAE's trainer uses them), and ``import privlin`` is cheap until a name is used.
"""
from __future__ import annotations

import importlib

__all__ = ["DPLinearClassifier", "PrivacyLeakWarning", "PrivacyReport", "fit", "evaluate", "check_labels"]

_HOME = {"DPLinearClassifier": "estimator", "fit": "estimator", "evaluate": "estimator", "check_labels": "estimator",
         "PrivacyLeakWarning": "report", "PrivacyReport": "report"}


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
