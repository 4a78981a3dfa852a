"""privlin.selection: report-noisy-max with Gaussian noise picks with the closed-form probabilities and
is charged to the ledger; the end-to-end holdout flow picks a good setting."""
import math

import numpy as np
import pytest
from dp_accounting import dp_event as ev
from dp_accounting.pld import pld_privacy_accountant as pld
from scipy.stats import norm

from privlin.ledger import PrivacyLedger
from privlin.selection import holdout, select_private
from privlin.sweep import SweepResult, sweep


def _constant_predictors(K=2, D=3):
    """Setting s always predicts class s (a bias that wins), so its validation count is #(y == s)."""
    coef = np.zeros((K, D, K), np.float32)
    intercept = np.full((K, K), -1.0, np.float32)
    intercept[np.arange(K), np.arange(K)] = 1.0
    from privlin.plan import make_plan

    plan = make_plan({"normalize": False, "center": False}, n=23, dim=D, n_classes=K)
    recs = [{"epsilon": 1.0, "plan": plan, "accuracy": None} for _ in range(K)]
    return SweepResult(recs, coef, intercept, np.arange(K), total_epsilon=2.0, total_delta=1e-5)


def test_selection_probabilities_match_the_gaussian_closed_form():
    res = _constant_predictors()
    y = np.array([0] * 13 + [1] * 10)
    X = np.zeros((len(y), 3), np.float32)
    eps, delta = 1.0, 1e-5
    picks = np.array([select_private(res, (X, y), epsilon=eps, delta=delta, random_state=s).index for s in range(600)])
    sel = select_private(res, (X, y), epsilon=eps, delta=delta, random_state=0)
    # counts 13 vs 10, each count gets N(0, (σ√2)²): P(pick 0) = Φ(3 / (2σ))
    p0 = norm.cdf(3.0 / (2.0 * sel.noise_multiplier))
    sd = math.sqrt(p0 * (1 - p0) / len(picks))
    assert abs((picks == 0).mean() - p0) < 4 * sd
    # σ is calibrated to (ε, δ) for one Gaussian: check with dp-accounting's PLD
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(ev.GaussianDpEvent(sel.noise_multiplier))
    assert acc.get_epsilon(delta) == pytest.approx(eps, rel=1e-3)
    assert sel.training_epsilon == 2.0 and sel.n_validation == 23


def test_holdout_sweep_then_private_selection_is_charged_and_picks_a_good_setting():
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 8)) * 3
    y = rng.integers(0, 3, 900)
    X = (centers[y] + rng.normal(size=(900, 8))).astype(np.float32)
    (Xt, yt), (Xv, yv) = holdout(X, y, 0.3, seed=1)
    assert len(yt) == 630 and len(yv) == 270
    led = PrivacyLedger.in_memory()
    # one deliberately bad setting (tiny steps, tiny lr) among good ones
    res = sweep((Xt, yt), epsilon=[4.0], method="sgd", steps=[1, 20], learning_rate=[1e-4, 2.0], center=False,
                classes=[0, 1, 2], eval_split=None, random_state=0, ledger=led)
    sel = select_private(res, (Xv, yv), epsilon=2.0, delta=1e-6, random_state=0, ledger=led)
    accs = [(res.predict(i, Xv) == yv).mean() for i in range(len(res))]
    assert accs[sel.index] >= max(accs) - 0.05
    assert sel.record["selected_on"].startswith("val (private")
    assert [e.mechanism for e in led.entries] == ["privlin.sweep/sgd", "privlin.selection/report_noisy_max_gaussian"]
    with pytest.raises(ValueError, match="epsilon"):
        select_private(res, (Xv, yv), epsilon=0)
    with pytest.raises(ValueError, match="fraction"):
        holdout(X, y, 1.5)


def test_selection_on_a_store_split_charges_that_split(make_store, blobs):
    X, y = blobs(300, seed=2)
    st = make_store({"train": (X[:200], y[:200]), "val": (X[200:], y[200:])})
    res = sweep(st, epsilon=[1.0, 4.0], classes=range(4), eval_split=None)
    sel = select_private(res, st, split="val", epsilon=0.5)
    from privlin.data import as_source

    (entry,) = as_source(st, "val").ledger().entries
    assert entry.mechanism == "privlin.selection/report_noisy_max_gaussian" and entry.epsilon == 0.5
    assert sel.n_validation == 100 and len(as_source(st, "train").ledger()) == 1
    from privlin.ledger import PrivacyBudgetExceeded

    with pytest.raises(PrivacyBudgetExceeded):  # the cap binds the validation split too, before it is read
        select_private(res, st, split="val", epsilon=0.5, budget=(0.6, 1e-6))
