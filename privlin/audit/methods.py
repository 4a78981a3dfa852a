"""privlin's methods as audited trainers: what ``AUDITS`` names for the canary audit, an estimator run as a pure
trainer, and the one-run audit of an estimator fit."""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from .bounds import AuditResult, one_run_audit
from .canary import canary_audit, gaussian_sum_trainer


def _gaussian_sum_method(epsilon: float, delta: float, n_classes: int, **_):
    from privlin import accounting

    sigma = accounting.calibrate_noise(epsilon, delta)
    return gaussian_sum_trainer(sigma, 1.0, n_classes)


def estimator_trainer(params: Mapping, *, n: int, dim: int, n_classes: int) -> Callable:
    """The shipped estimator's in-memory fit as a pure trainer ``(X, y, key) -> released dict``.

    The same plan (:func:`privlin.plan.make_plan` of ``DPLinearClassifier(**params)``) and the same function
    the estimator runs (:func:`privlin.runner.train_rows`); a label ``-1`` is a null row (the zero-out
    neighbour of a canary).  Everything it releases (weights, intercept, noisy mean) is attacked.
    """
    import jax
    import jax.numpy as jnp

    from privlin import runner
    from privlin.plan import make_plan

    plan = make_plan(params, n=n, dim=dim, n_classes=n_classes)
    static = plan.static()
    sigma_ref = plan.reference_sigma

    def trainer(X, y, key):
        mask = (y >= 0).astype(jnp.float32)
        Y = jax.nn.one_hot(jnp.maximum(y, 0), n_classes)
        rel = runner.train_rows(static, X, Y, mask, float(plan.n), key, plan.sigma, sigma_ref, plan.learning_rate,
                                plan.learning_rate_ceiling)
        out = {"coef": rel.W.T, "intercept": rel.b}
        rows = plan.row_map(rel.values)  # how the fitted model maps rows
        mean, log_scale = rows.mean, rows.log_scale
        if mean is not None:
            out["mean"] = mean
        if log_scale is not None:
            out["radius"] = log_scale
        return out

    trainer.plan = plan
    return trainer


def _estimator_method(**params) -> Callable:
    def factory(epsilon: float, delta: float, n_classes: int, n: int, dim: int, **_):
        return estimator_trainer({**params, "epsilon": epsilon, "delta": delta}, n=n, dim=dim, n_classes=n_classes)

    return factory


#: The canary audits: name -> factory(epsilon, delta, n_classes, n, dim) -> pure trainer (X, y, key) -> released
#: dict.  Each estimator entry audits the shipped defaults (steps, batch size): what users run.
AUDITS: dict[str, Callable] = {
    "gaussian_sum": _gaussian_sum_method,
    "adam1": _estimator_method(method="adam1"),
    "sgd": _estimator_method(method="sgd"),
    "minibatch_sgd": _estimator_method(method="minibatch"),
    "minibatch_adam": _estimator_method(method="minibatch", optimizer="adam"),
}


def one_run_estimator_audit(params: Mapping, X, y, *, canaries: int = 1000, seed: int = 0, delta: float = 1e-5,
                            confidence: float = 0.95) -> AuditResult:
    """One-run audit (Steinke, Nasr & Jagielski 2023) of ``DPLinearClassifier(**params).fit`` itself.

    ``canaries`` Dirac rows on coordinates no other row uses, each included with probability ½ (otherwise a
    null row takes its place: the zero-out neighbour), one fit through the estimator's own ``fit`` — whatever
    path ``params`` choose (in memory, streamed with ``memory_limit=0``, ``secure_mode``).  The score of a
    canary is its class's weight on its coordinate (use a method with continuous weights: adam1's sign-valued
    step ties most scores).
    """
    from privlin import DPLinearClassifier

    X, y = np.asarray(X, np.float32), np.asarray(y)
    rng = np.random.default_rng(seed)
    n, d = X.shape
    k = int(y.max()) + 1
    Xa = np.zeros((n + canaries, d + canaries), np.float32)
    Xa[:n, :d] = X
    cy = rng.integers(0, k, canaries)
    included = rng.random(canaries) < 0.5
    Xa[n + np.flatnonzero(included), d + np.flatnonzero(included)] = 1.0
    ya = np.concatenate([y, np.where(included, cy, -1)])  # -1: not a class, a null row
    est = DPLinearClassifier(**{**params, "classes": range(k)}).fit(Xa, ya)
    scores = est.coef_transformed_[cy, d + np.arange(canaries)]
    res = one_run_audit(scores, included, delta=delta, epsilon_claimed=est.privacy_.epsilon, confidence=confidence)
    res.details["path"] = ("secure_mode" if params.get("secure_mode") else
                           "streamed" if params.get("memory_limit") == 0 else "in memory")
    return res


def audit_method(method: str, epsilon: float, *, delta: float = 1e-5, runs: int = 1000, seed: int = 0,
                 X=None, y=None, confidence: float = 0.95) -> AuditResult:
    """Canary-audit a named privlin method at ``epsilon`` on ``X, y`` (default: digits, rows at unit norm)."""
    if method not in AUDITS:
        raise ValueError(f"unknown method {method!r}; choose from {sorted(AUDITS)}")
    if X is None:
        X, y = digits_at_unit_norm()
    n_classes = int(np.max(y)) + 1
    train = AUDITS[method](epsilon=epsilon, delta=delta, n_classes=n_classes, n=len(X) + 1, dim=X.shape[1])
    res = canary_audit(train, X, y, runs=runs, delta=delta, epsilon_claimed=epsilon, seed=seed, confidence=confidence)
    res.attack = f"{res.attack} (canary MI, {res.details['runs']} runs)"
    return res


def digits_at_unit_norm():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32), y.astype(np.int32)
