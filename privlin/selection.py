"""Private hyperparameter selection: pick the best setting of a sweep without leaking the data it looked at.

Why: a sweep reports each setting's ε, but the *best of* a sweep, chosen by accuracy on private data, is not
covered by any of them (Papernot & Steinke, 2022).  Mehta et al. (seed 003, App. E/F) and most papers leave
this cost out.  Here the choice is a mechanism with its own account:

* **Training side.**  The choice depends on every trained model, so with respect to a training example it
  costs the composition of all S settings (:attr:`privlin.sweep.SweepResult.total_epsilon`, already charged
  to the ledger by the sweep).
* **Validation side.**  The candidates are scored on a held-out validation split (rows not used for training)
  by their number of correct predictions.  Adding or removing one validation row moves each of the S counts
  by at most 1, so the count vector has L2 sensitivity √S.  We release only ``argmax(counts + N(0, (σ√S)²))``:
  a post-processed Gaussian mechanism (report-noisy-max with Gaussian noise), accounted exactly as
  ``GaussianDpEvent(σ)`` and composed with everything else on the same ledger.

A row is in the training part or in the validation part, never both; charging both costs to one ledger (when
the validation rows are carved from the training split) over-counts, which is the safe side.  The test split
is then touched once, by the selected model only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from dp_accounting import dp_event as _ev

from . import accounting, data
from .noise import make_key, noisy_counts
from .sweep import SweepResult, correct_counts

__all__ = ["select_private", "Selection", "holdout", "noisy_counts"]


@dataclass(frozen=True)
class Selection:
    """A privately selected setting.

    Attributes
    ----------
    index : int
        Position of the chosen setting in the sweep's records.
    record : dict
        Its record, with ``selected_on`` and ``selection_epsilon`` added.
    epsilon, delta : float
        Privacy of the selection step with respect to the validation rows (Gaussian mechanism).
    noise_multiplier : float
        σ of that mechanism (noise std σ·√S on the correct counts).
    training_epsilon : float
        The sweep's total ε (all settings composed) with respect to the training rows.
    n_validation : int
    """

    index: int
    record: dict = field(repr=False)
    epsilon: float
    delta: float
    noise_multiplier: float
    training_epsilon: float
    n_validation: int

    def dp_event(self) -> _ev.DpEvent:
        return _ev.GaussianDpEvent(self.noise_multiplier)


def holdout(X, y, fraction: float = 0.1, *, seed: int = 0):
    """Split arrays into (train, validation) pairs by a public random permutation (not by label).

    Returns
    -------
    (X_train, y_train), (X_val, y_val)
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    X, y = np.asarray(X), np.asarray(y)
    perm = np.random.default_rng(seed).permutation(len(y))
    n_val = max(1, int(round(fraction * len(y))))
    v, t = perm[:n_val], perm[n_val:]
    return (X[t], y[t]), (X[v], y[v])


def select_private(result: SweepResult, validation, *, epsilon: float, delta: float = 1e-6, split: str = "val",
                   random_state=None, budget=None, ledger=None) -> Selection:
    """Choose a setting of ``result`` by noisy validation accuracy, privately.

    Parameters
    ----------
    result : SweepResult
        A sweep trained on rows disjoint from ``validation``.
    validation : stores.Split, store (with ``split``) or (X (m, D), y (m,))
        Held-out private rows.  A store split is charged on its own ledger, always.
    epsilon, delta : float
        Budget of the selection step on the validation rows.
    random_state : None, int or jax key
        None: OS entropy (the noise must stay secret for the guarantee).
    budget, ledger
        As for :class:`privlin.DPLinearClassifier`: charged with the selection's Gaussian event before the
        validation rows are read (arrays: only when given).

    Returns
    -------
    Selection
    """
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if len(result) == 0:
        raise ValueError("the sweep has no settings")
    source = data.as_source(validation, split)
    if source.n == 0:
        raise ValueError("the validation split has no rows")
    sigma = accounting.calibrate_noise(epsilon, delta, accountant="gdp")
    event = _ev.GaussianDpEvent(sigma)
    led = source.ledger(cap=budget, ledger=ledger)
    info = make_key(random_state)
    if led is not None:
        led.charge(event, mechanism="privlin.selection/report_noisy_max_gaussian", epsilon=epsilon, delta=delta,
                   params={"candidates": len(result), "n": source.n, "seeded": info.seeded})
    noisy = noisy_counts(correct_counts(result, source), sigma * math.sqrt(len(result)), info.key)
    i = int(np.argmax(noisy))
    rec = dict(result.records[i], index=i, selected_on=f"{split} (private: report-noisy-max, ε={epsilon:g})",
               selection_epsilon=epsilon, selection_delta=delta)
    return Selection(index=i, record=rec, epsilon=float(epsilon), delta=float(delta), noise_multiplier=sigma,
                     training_epsilon=result.total_epsilon, n_validation=source.n)
