"""privlin: differentially private linear classifiers on frozen-backbone features.

    import privlin
    model = privlin.fit("feats.zarr", eps=8, classes=range(10))   # or privlin.fit((X, y), eps=1, ...)
    privlin.evaluate(model, "feats.zarr")                           # accuracy on the 'test' split
    print(model.privacy_)                                           # (ε, δ), σ's, steps, accountant, neighbours

Modules: ``accounting`` (every privacy number), ``noise`` (every noise draw),
``preprocess`` (normalize / private centering), ``train`` (pure jittable trainers),
``estimator`` (scikit-learn ``DPLinearClassifier``), ``api`` (``fit``/``evaluate`` on stores).
"""
from .report import PrivacyLeakWarning, PrivacyReport
from .estimator import DPLinearClassifier
from .api import evaluate, fit

__all__ = ["DPLinearClassifier", "PrivacyLeakWarning", "PrivacyReport", "fit", "evaluate"]
