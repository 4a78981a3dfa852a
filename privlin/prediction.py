"""Prediction and accuracy of a fitted linear model, each written once.

:func:`logits` is the one prediction (rows as the fitted model sees them → logits; :func:`predicted_index` takes
their argmax) and :func:`correct_counts` the one accuracy (correct predictions over a source's rows).  The
estimator (``predict``, ``decision_function``, ``predict_proba``, ``privlin.evaluate``), the sweep
(``SweepResult.predict``, its evaluation), the private selection and the search all call these, so a model
predicts, and is scored, the same way whichever surface made it.

Scoring is one rule for every caller:

* **labels** are matched as a fit matches them (:func:`privlin.data.label_index`): a label outside the model's
  class list, of any type, is never correct and never an error.  The model's labels are what its ``predict``
  returns (the estimator's ``classes_``; a sweep's store class names where it has them, else its class list).
  Where the rows' source publishes class names (a store: its labels index them) and those names are the model's
  labels, each label is compared as its name (its index into them); otherwise labels are compared as they are.
* **non-finite rows** (a NaN or inf feature) are never correct and never an error: counting runs after the rows'
  ledger was charged, so no error may depend on one row.  They stay in the denominator (``source.n_valid``: the
  rows that have features; a store's rows skipped at extraction are in neither).
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax.numpy as jnp
import numpy as np

from . import data, runner

__all__ = ["logits", "predicted_index", "correct_counts", "label_classes"]


def logits(plan, coef, intercept, X, *, values):
    """Logits (n, k) float32 of a fitted model on rows X (n, d): the rows mapped as the model saw them in training
    (:func:`privlin.runner.preprocess_rows` with its released ``values`` by release name), then
    ``rows @ coef.T + intercept``; ``coef`` (k, d') and ``intercept`` (k,) as trained (``coef_transformed_``).
    Rows are used as given: a caller that must refuse NaN/inf checks them first."""
    rows = runner.preprocess_rows(plan, X, values=values)
    return rows @ jnp.asarray(np.asarray(coef).T, jnp.float32) + jnp.asarray(intercept, jnp.float32)


def predicted_index(plan, coef, intercept, X, *, values) -> np.ndarray:
    """Index (n,) into the model's labels of each row's most likely class (the argmax of :func:`logits`)."""
    return np.asarray(jnp.argmax(logits(plan, coef, intercept, X, values=values), axis=1))


def label_classes(labels, source: data.Source) -> np.ndarray:
    """What ``source``'s labels are matched against for a model whose ``predict`` returns ``labels`` (K,): the
    indices 0..K-1 where the source publishes exactly these names (its labels index them), else ``labels``."""
    labels = np.asarray(labels)
    names = source.published_classes()
    names = None if names is None else np.asarray(list(names))
    if names is not None and names.shape == labels.shape and np.array_equal(names, labels):
        return np.arange(labels.size)
    return labels


def correct_counts(predictors: Sequence[Callable[[np.ndarray], np.ndarray]], labels, source: data.Source,
                   block_rows: int = 65536) -> np.ndarray:
    """Correct predictions (S,) int64 of each of S models on ``source``'s rows that have features, one pass.

    ``predictors[s](X)`` gives model s's :func:`predicted_index` on finite float32 rows X (b, d); every model
    returns indices into the same ``labels`` (its ``predict`` values).  The rule (module docstring): labels matched
    as a fit matches them, a store's labels as their names where those are ``labels``, non-finite rows never
    correct and never an error.  Divide by ``source.n_valid`` for an accuracy.
    """
    classes = label_classes(labels, source)
    correct = np.zeros(len(predictors), dtype=np.int64)
    for X, y in source.blocks(block_rows):
        X = np.asarray(X, np.float32)
        finite = np.isfinite(X).all(axis=1)
        X = np.where(finite[:, None], X, np.float32(0))  # a null row: predicted, then never counted
        idx, known = data.label_index(classes, y)
        hit = known & finite
        for s, predict in enumerate(predictors):
            correct[s] += int(np.count_nonzero(hit & (np.asarray(predict(X)) == idx)))
    return correct
