"""Lower bounds on ε from an attack's outcomes (see :mod:`privlin.audit`): exact binomial intervals on its
error rates turned into ε, the threshold attack on two sets of scores, and the one-run audit's p-value."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

import numpy as np
from scipy import stats


def clopper_pearson(k, n, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact two-sided (1 − alpha) binomial confidence interval for k successes in n.

    Returns
    -------
    lo, hi : arrays shaped like ``k``
    """
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    lo = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
    hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return lo, hi


def epsilon_from_error_rates(fpr, fnr, delta: float) -> np.ndarray:
    """ε implied by an attack with these error rates against an (ε, δ)-DP mechanism.

    ``max(log((1−δ−FNR)/FPR), log((1−δ−FPR)/FNR), 0)``; inputs may be arrays.
    """
    fpr = np.asarray(fpr, dtype=float)
    fnr = np.asarray(fnr, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.maximum(1 - delta - fnr, 0) / fpr)
        b = np.log(np.maximum(1 - delta - fpr, 0) / fnr)
    out = np.fmax(np.fmax(a, b), 0.0)
    return np.nan_to_num(out, nan=0.0, posinf=np.inf)


def epsilon_lower_bound(fp: int, n_out: int, fn: int, n_in: int, delta: float, confidence: float = 0.95) -> float:
    """A lower bound on ε, valid with probability ≥ ``confidence``.

    Parameters
    ----------
    fp, n_out : int
        False positives among the ``n_out`` runs without the canary.
    fn, n_in : int
        False negatives among the ``n_in`` runs with it.
    delta : float
        δ of the claim being tested.
    confidence : float
        Both one-sided Clopper–Pearson upper bounds (FPR and FNR) hold jointly
        with this probability (each at (1 − confidence)/2).
    """
    alpha = 1.0 - confidence
    # one-sided upper bound at level alpha/2 == two-sided interval at level alpha
    _, fpr_hi = clopper_pearson(fp, n_out, alpha)
    _, fnr_hi = clopper_pearson(fn, n_in, alpha)
    return float(epsilon_from_error_rates(fpr_hi, fnr_hi, delta))


@dataclass
class AuditResult:
    """Outcome of an audit.

    Attributes
    ----------
    epsilon_lb : float
        Audited lower bound on ε, valid with probability ≥ ``confidence``.
    epsilon_claimed : float or None
        What the trainer's accountant claims (``nan`` when not given).
    attack : str
        The attack that produced the bound.
    confidence, delta : float
    details : dict
        Counts (fp, fn, runs) or (m, r, v) behind the bound.
    ceiling : float
        The largest lower bound these run counts could certify (a perfect attack: no error).  A claim above
        the ceiling cannot be refuted by this audit, whatever the code does: an audit row means something
        only for ε below its ceiling.
    """

    epsilon_lb: float
    epsilon_claimed: float = math.nan
    attack: str = ""
    confidence: float = 0.95
    delta: float = 0.0
    details: dict = field(default_factory=dict)
    ceiling: float = math.nan

    @property
    def violated(self) -> bool:
        """True when the audit proves the claim false (lower bound > claim)."""
        return self.epsilon_lb > self.epsilon_claimed

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        verdict = ("VIOLATED" if self.violated else
                   "consistent (claim above this audit's ceiling: not testable)" if self.epsilon_claimed > self.ceiling
                   else "consistent")
        return (f"claimed ε={self.epsilon_claimed:.3g}  audited lower bound ε≥{self.epsilon_lb:.3f} "
                f"(ceiling {self.ceiling:.2f}; {self.confidence:.0%} confidence, δ={self.delta:g})  "
                f"attack: {self.attack}  -> {verdict}")


def _best_threshold(s_in: np.ndarray, s_out: np.ndarray, delta: float, alpha: float = 0.05):
    """Threshold and direction with the largest point-estimate ε (used on the selection half)."""
    best = (-1.0, 0.0, 1)
    for sign in (1, -1):
        a, b = sign * s_in, sign * s_out
        t = np.unique(np.concatenate([a, b]))
        # guess "in" when score >= t
        tpr = 1.0 - np.searchsorted(np.sort(a), t, side="left") / a.size
        fpr = 1.0 - np.searchsorted(np.sort(b), t, side="left") / b.size
        # rank thresholds by the bound they would give (Clopper-Pearson at the audit's
        # confidence): favours tail thresholds whose error counts are small but certain
        fp = np.rint(fpr * b.size)
        fn = np.rint((1 - tpr) * a.size)
        _, fpr_hi = clopper_pearson(fp, b.size, alpha)
        _, fnr_hi = clopper_pearson(fn, a.size, alpha)
        eps = epsilon_from_error_rates(fpr_hi, fnr_hi, delta)
        i = int(np.argmax(eps))
        if eps[i] > best[0]:
            best = (float(eps[i]), float(t[i]), sign)
    return best


def threshold_audit(
    scores_in: Mapping[str, np.ndarray],
    scores_out: Mapping[str, np.ndarray],
    *,
    delta: float,
    confidence: float = 0.95,
    select_fraction: float = 0.5,
    epsilon_claimed: float = math.nan,
    rng: np.random.Generator | int | None = 0,
) -> AuditResult:
    """Membership inference by thresholding, with honest attack selection.

    Parameters
    ----------
    scores_in, scores_out : mapping name -> array, shapes (n_in,), (n_out,)
        Attack scores of the runs with and without the canary, one array per
        candidate attack (higher or lower may mean "in": both are tried).
    delta, confidence : float
    select_fraction : float
        Share of the runs used to choose attack, threshold and direction; the
        bound is computed on the rest only, so the choice costs no validity.
    rng : numpy Generator or int
        Shuffles runs before the split.

    Returns
    -------
    AuditResult
    """
    rng = np.random.default_rng(rng)
    names = list(scores_in)
    n_in, n_out = len(scores_in[names[0]]), len(scores_out[names[0]])
    p_in, p_out = rng.permutation(n_in), rng.permutation(n_out)
    k_in, k_out = int(n_in * select_fraction), int(n_out * select_fraction)
    if min(k_in, k_out, n_in - k_in, n_out - k_out) < 2:
        raise ValueError("too few runs to both select and evaluate an attack")
    sel_in, ev_in = p_in[:k_in], p_in[k_in:]
    sel_out, ev_out = p_out[:k_out], p_out[k_out:]
    best = None
    for name in names:
        a, b = np.asarray(scores_in[name], float), np.asarray(scores_out[name], float)
        if a.shape != (n_in,) or b.shape != (n_out,):
            raise ValueError(f"attack {name!r}: scores must have shapes ({n_in},), ({n_out},)")
        est, thr, sign = _best_threshold(a[sel_in], b[sel_out], delta, 1.0 - confidence)
        if best is None or est > best[0]:
            best = (est, thr, sign, name)
    _, thr, sign, name = best
    a = sign * np.asarray(scores_in[name], float)[ev_in]
    b = sign * np.asarray(scores_out[name], float)[ev_out]
    fn = int(np.sum(a < thr))
    fp = int(np.sum(b >= thr))
    lb = epsilon_lower_bound(fp, b.size, fn, a.size, delta, confidence)
    return AuditResult(
        epsilon_lb=lb, epsilon_claimed=float(epsilon_claimed), attack=name, confidence=confidence, delta=delta,
        ceiling=epsilon_lower_bound(0, b.size, 0, a.size, delta, confidence),
        details={"fp": fp, "n_out": int(b.size), "fn": fn, "n_in": int(a.size), "threshold": thr * sign,
                 "direction": "score >= t means in" if sign > 0 else "score <= t means in",
                 "selection_runs": k_in + k_out},
    )


# --------------------------------------------------------------------------- one-run audit


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P[≥ v correct of r guesses] under (ε, δ)-DP (Steinke, Nasr & Jagielski 2023, Thm 3.3 / App. code).

    ``m`` canaries each included with probability ½; ``r`` guesses (abstentions excluded).
    """
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got m={m}, r={r}, v={v}")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    beta = stats.binom.sf(v - 1, r, q)
    alpha = 0.0
    if delta > 0 and v > 0:
        i = np.arange(1, v + 1)
        cum = np.cumsum(stats.binom.pmf(v - i, r, q))  # P[v > Bin(r, q) >= v - i]
        alpha = float(np.max(cum / i))
    return min(float(beta + alpha * delta * 2 * m), 1.0)


def one_run_epsilon(m: int, r: int, v: int, delta: float, confidence: float = 0.95) -> float:
    """The largest ε rejected at level 1 − ``confidence`` by :func:`one_run_p_value` (0 if none)."""
    p = 1.0 - confidence
    lo, hi = 0.0, 1.0
    if one_run_p_value(m, r, v, lo, delta) >= p:
        return 0.0
    while one_run_p_value(m, r, v, hi, delta) < p:
        lo, hi = hi, hi + 1.0
        if hi > 60:
            return lo
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if one_run_p_value(m, r, v, mid, delta) < p:
            lo = mid
        else:
            hi = mid
    return lo


def one_run_audit(
    scores,
    included,
    *,
    delta: float,
    confidence: float = 0.95,
    guesses: Sequence[int] | None = None,
    epsilon_claimed: float = math.nan,
) -> AuditResult:
    """One-run audit from canary scores (higher score = more likely included).

    Parameters
    ----------
    scores : array, shape (m,)
    included : bool array, shape (m,)
        Which canaries were really in the training set (coin flips, p = ½).
    guesses : sequence of int, optional
        Candidate numbers k of "in" guesses (top k) and "out" guesses (bottom k).
        Every candidate is tested at level (1 − confidence)/len(guesses)
        (Bonferroni), so picking the best costs no validity. Default: 5 values
        from m/50 to m/2.

    Returns
    -------
    AuditResult with ``details = {"m", "r", "v", "k"}``.
    """
    scores = np.asarray(scores, float)
    included = np.asarray(included, bool)
    m = scores.size
    if included.shape != (m,):
        raise ValueError("included must have the shape of scores")
    if guesses is None:
        guesses = sorted({max(1, int(m * f)) for f in (0.02, 0.05, 0.1, 0.25, 0.5)})
    order = np.argsort(-scores, kind="stable")
    conf_each = 1.0 - (1.0 - confidence) / len(guesses)
    best = (0.0, 0, 0, 0)
    for k in guesses:
        k = int(min(k, m // 2))
        if k < 1:
            continue
        v = int(included[order[:k]].sum() + (~included[order[m - k:]]).sum())
        eps = one_run_epsilon(m, 2 * k, v, delta, conf_each)
        if eps > best[0] or best[1] == 0:
            best = (eps, 2 * k, v, k)
    eps, r, v, k = best
    ceiling = max(one_run_epsilon(m, 2 * int(min(g, m // 2)), 2 * int(min(g, m // 2)), delta, conf_each)
                  for g in guesses if min(g, m // 2) >= 1)
    return AuditResult(epsilon_lb=eps, epsilon_claimed=float(epsilon_claimed), attack=f"one-run top/bottom-{k}",
                       confidence=confidence, delta=delta, details={"m": m, "r": r, "v": v, "k": k},
                       ceiling=ceiling)
