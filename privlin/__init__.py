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

_HOME = {"DPLinearClassifier": "estimator", "evaluate": "estimator", "check_labels": "estimator",
         "PrivacyLeakWarning": "report", "PrivacyReport": "report"}


def fit(data_, y=None, *, split: str = "train", **kwargs):
    """:func:`privlin.estimator.fit` (every parameter is described there): a :class:`DPLinearClassifier` fitted on a
    store split or on arrays.  The names a user types (the store path, the split, each keyword, ``method=``) are
    checked here (:mod:`privlin.spelling`), before JAX and scikit-learn are imported, so a typo is reported at once."""
    from .spelling import check_method, check_params, check_split

    check_params(kwargs, also=("eps", "progress"))
    if kwargs.get("method") is not None:
        check_method(kwargs["method"])
    if y is None and (isinstance(data_, str) or hasattr(data_, "__fspath__")):
        import stores

        data_ = stores.open(data_)
        check_split(data_, split)
    from .estimator import fit as fit_

    return fit_(data_, y, split=split, **kwargs)


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
