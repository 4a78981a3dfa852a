"""privlin: differentially private linear classifiers on frozen-backbone features.

    import privlin
    model = privlin.fit("feats.zarr", epsilon=8, classes=range(10))   # or privlin.fit((X, y), epsilon=1, ...)
    privlin.evaluate(model, "feats.zarr")                               # accuracy on the 'test' split
    print(model.privacy_)                                               # (ε, δ), σ's, data, ledger total

One path from every entry point to the trained model: ``data`` (what the user passed → a source of rows, the public
class list, the ledger), ``plan`` (every default and σ, decided before any row is read), ``runner`` (normalize → the
plan's private releases: row norm, centering, scaling, curvature → training, in memory or streaming), built from the
pure pieces ``preprocess`` and ``train``; privacy numbers from ``accounting`` only; ``estimator`` is the scikit-learn
surface (``DPLinearClassifier``, ``fit``, ``evaluate``); ``sweep`` and ``selection`` run many plans; ``ledger``
records what every split has spent; ``audit`` measures the shipped estimator.
"""
from .report import PrivacyLeakWarning, PrivacyReport
from .estimator import DPLinearClassifier, evaluate, fit

__all__ = ["DPLinearClassifier", "PrivacyLeakWarning", "PrivacyReport", "fit", "evaluate"]
