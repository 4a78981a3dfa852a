"""Empirical privacy audits: a lower bound on the ε a trainer really gives.

A privacy guarantee is a claim about code. An audit runs the code and attacks
it: if a membership-inference attack on a worst-case *canary* succeeds more
often than ε allows, the code is broken, whatever its accountant says.

Two audits, both statistically valid lower bounds (at a stated confidence):

* :func:`canary_audit` — many runs with one canary and with a null row in its place (zero-out
  neighbours). Half of the runs choose the attack (score function, threshold,
  direction); the other half measure its false-positive and false-negative
  rates, whose Clopper–Pearson upper bounds turn into ε via the hypothesis-test
  view of (ε, δ)-DP (Kairouz, Oh & Viswanath 2015):
  ``FPR + e^ε FNR ≥ 1 − δ`` and ``FNR + e^ε FPR ≥ 1 − δ``. Linear models are
  cheap, so the runs are batched with ``jax.vmap`` over seeds.
* :func:`one_run_audit` — Steinke, Nasr & Jagielski (2023): m canaries, each
  included with probability ½, *one* training run; the attacker guesses the
  k highest- and k lowest-scoring canaries; the number of correct guesses gives
  a p-value for "the mechanism is (ε, δ)-DP" (their Theorem / appendix code).
  Usable on a real store where thousands of runs cost too much.

The bounds can only be as large as the number of runs allows: with n evaluation
runs per world, ``ε_lb ≤ log(n / ~3.7)`` at 95 % (≈ 4.2 for n = 250), so an
audit at ε = 8 is loose by construction. See PRIVACY.md.

Command line: ``python -m privlin.audit --method gaussian_sum --epsilon 1 --runs 1000``.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy import stats

__all__ = [
    "clopper_pearson",
    "epsilon_from_error_rates",
    "epsilon_lower_bound",
    "AuditResult",
    "threshold_audit",
    "one_run_p_value",
    "one_run_epsilon",
    "one_run_audit",
    "run_many",
    "canary_audit",
    "dirac_canary",
    "estimator_trainer",
    "one_run_estimator_audit",
    "ATTACKS",
]


# --------------------------------------------------------------------------- statistics


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


# --------------------------------------------------------------------------- running trainers


def run_many(train_fn: Callable, X, y, keys, *, chunk: int = 250) -> dict:
    """Run ``train_fn(X, y, key)`` once per key, vmapped in chunks.

    Parameters
    ----------
    train_fn : callable (X (N, D), y (N,), key) -> dict of arrays
        A pure, jittable trainer; its output is what the model releases.
    keys : jax key array, shape (R,)
    chunk : int
        Runs per vmapped call (bounds memory).

    Returns
    -------
    dict name -> numpy array with a leading axis of R runs.
    """
    import jax
    import jax.numpy as jnp

    from privlin import sensitivity

    X = jnp.asarray(X)
    y = jnp.asarray(y)
    f = jax.jit(jax.vmap(train_fn, in_axes=(None, None, 0)))
    parts = []
    with sensitivity.x64():  # privlin's exact sums are float64
        for i in range(0, keys.shape[0], chunk):
            parts.append(jax.tree_util.tree_map(np.asarray, f(X, y, keys[i:i + chunk])))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _flat(out: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(out[k], float).reshape(len(out[k]), -1) for k in sorted(out)], axis=1)


def _canary_contrast(out, x_c, y_c):
    W = np.asarray(out["coef"], float)[..., :len(x_c)]  # (R, K, D): a radial model's last input is not the canary's
    proj = W @ x_c  # (R, K)
    others = np.delete(proj, y_c, axis=1).mean(axis=1)
    return proj[:, y_c] - others


#: Attacks tried by :func:`canary_audit` (all chosen on the selection half only).
ATTACKS = ("canary-direction", "canary-contrast", "mean-difference", "diagonal-LDA")


def _attack_scores(out_in, out_out, x_c, y_c, sel_in, sel_out) -> tuple[dict, dict]:
    """Score every run under every attack. Directions learned from the selection runs."""
    s_in, s_out = {}, {}
    if "coef" in out_in:
        s_in["canary-direction"] = np.asarray(out_in["coef"], float)[:, y_c, :len(x_c)] @ x_c
        s_out["canary-direction"] = np.asarray(out_out["coef"], float)[:, y_c, :len(x_c)] @ x_c
        s_in["canary-contrast"] = _canary_contrast(out_in, x_c, y_c)
        s_out["canary-contrast"] = _canary_contrast(out_out, x_c, y_c)
    f_in, f_out = _flat(out_in), _flat(out_out)
    d = f_in[sel_in].mean(0) - f_out[sel_out].mean(0)
    var = 0.5 * (f_in[sel_in].var(0) + f_out[sel_out].var(0))
    var = np.maximum(var, 1e-12 * max(var.max(), 1e-300))
    s_in["mean-difference"], s_out["mean-difference"] = f_in @ d, f_out @ d
    w = d / var
    s_in["diagonal-LDA"], s_out["diagonal-LDA"] = f_in @ w, f_out @ w
    return s_in, s_out


def dirac_canary(X, clip: float = 1.0) -> np.ndarray:
    """A worst-case canary for linear models: norm ``clip`` on the least-used feature.

    On a coordinate no training row uses, the canary's contribution is all that
    separates the two worlds; everything else there is noise.
    """
    X = np.asarray(X)
    j = int(np.argmin(np.abs(X).sum(axis=0)))
    x = np.zeros(X.shape[1], dtype=np.float32)
    x[j] = clip
    return x


def canary_audit(
    train_fn: Callable,
    X,
    y,
    *,
    canary_x=None,
    canary_y: int = 0,
    runs: int = 1000,
    delta: float = 1e-5,
    epsilon_claimed: float = math.nan,
    confidence: float = 0.95,
    seed: int = 0,
    chunk: int = 250,
    select_fraction: float = 0.5,
) -> AuditResult:
    """Audit ``train_fn`` with a canary: ``runs/2`` runs with it, ``runs/2`` with a null row in its place.

    The two worlds are zero-out neighbours (privlin's relation): the same N, the canary replaced by a row of
    zeros labelled ``-1`` (a label no class has, which a privlin trainer treats as a null row).

    Parameters
    ----------
    train_fn : callable (X, y, key) -> dict of released arrays
        Pure and jittable; ``"coef"`` (K, D) enables the canary-aware attacks.
        Everything it returns counts as released (weights, intercepts, means...).
    X, y : arrays, shapes (N, D), (N,)
        The other training data (public to the attacker: worst case).
    canary_x : array (D,), optional
        Default :func:`dirac_canary` with unit norm.
    canary_y : int
        The canary's label.
    runs : int
        Total runs, split evenly between the two worlds.
    delta, epsilon_claimed, confidence : float
    seed : int
        Seeds the runs and the selection split (audits are reproducible).

    Returns
    -------
    AuditResult (``details`` adds run counts and wall time)
    """
    X = np.asarray(X, np.float32)
    y = np.asarray(y)
    x_c = dirac_canary(X) if canary_x is None else np.asarray(canary_x, np.float32)
    if x_c.shape != (X.shape[1],):
        raise ValueError(f"canary_x must have shape ({X.shape[1]},), got {x_c.shape}")
    n_half = runs // 2
    if n_half < 8:
        raise ValueError("an audit needs at least 16 runs")
    t0 = time.perf_counter()
    from privlin import noise

    keys = noise.split(noise.make_key(seed).key, 2 * n_half)
    X_in = np.concatenate([X, x_c[None]], axis=0)
    y_in = np.concatenate([y, np.asarray([canary_y], dtype=y.dtype)])
    X_out = np.concatenate([X, np.zeros_like(x_c)[None]], axis=0)
    y_out = np.concatenate([y, np.asarray([-1], dtype=y.dtype)])
    out_in = run_many(train_fn, X_in, y_in, keys[:n_half], chunk=chunk)
    out_out = run_many(train_fn, X_out, y_out, keys[n_half:], chunk=chunk)
    wall = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    p_in, p_out = rng.permutation(n_half), rng.permutation(n_half)
    k = int(n_half * select_fraction)
    k_learn = k // 2
    # a quarter of the runs learns the data-driven attack directions, ...
    s_in, s_out = _attack_scores(out_in, out_out, x_c.astype(float), canary_y, p_in[:k_learn], p_out[:k_learn])
    # ... the rest goes to threshold_audit, which selects attack and threshold on some and bounds on the others
    s_in = {a: v[p_in[k_learn:]] for a, v in s_in.items()}
    s_out = {a: v[p_out[k_learn:]] for a, v in s_out.items()}
    rest = n_half - k_learn
    res = threshold_audit(s_in, s_out, delta=delta, confidence=confidence, select_fraction=(k - k_learn) / rest,
                          epsilon_claimed=epsilon_claimed, rng=seed)
    res.details.update({"runs": 2 * n_half, "train_seconds": wall})
    return res


# --------------------------------------------------------------------------- reference mechanism


def gaussian_sum_trainer(noise_multiplier: float, clip: float = 1.0, n_classes: int = 10) -> Callable:
    """The ideal full-batch Gaussian mechanism on per-class clipped sums.

    Releases ``coef = Σ_i onehot(y_i) ⊗ clip_C(x_i) + N(0, (σC)²)`` — the
    statistic every full-batch privlin trainer noises. Auditing it measures how
    tight the audit itself can be (the accountant is exact here).
    """
    import jax
    import jax.numpy as jnp

    from privlin import noise

    def train(X, y, key):
        norms = jnp.linalg.norm(X, axis=1, keepdims=True)
        Xc = X * jnp.minimum(1.0, clip / jnp.maximum(norms, 1e-12))
        sums = jax.nn.one_hot(y, n_classes, dtype=X.dtype).T @ Xc
        return {"coef": sums + noise.gaussian(key, sums.shape, noise_multiplier * clip, X.dtype)}

    return train


# --------------------------------------------------------------------------- methods and CLI


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
        if rel.mean is not None:
            out["mean"] = rel.mean
        if rel.radius is not None:
            out["radius"] = rel.radius
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
        X, y = _digits()
    n_classes = int(np.max(y)) + 1
    train = AUDITS[method](epsilon=epsilon, delta=delta, n_classes=n_classes, n=len(X) + 1, dim=X.shape[1])
    res = canary_audit(train, X, y, runs=runs, delta=delta, epsilon_claimed=epsilon, seed=seed, confidence=confidence)
    res.attack = f"{res.attack} (canary MI, {res.details['runs']} runs)"
    return res


def _digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32), y.astype(np.int32)


AUDIT_PROG = "python -m privlin.audit"


def _audit_parser():
    """The command line of :func:`main` (limits as data: ``cliconv``)."""
    import cliconv as cli

    from privlin.defaults import METHODS as ESTIMATOR_METHODS

    p = cli.parser(AUDIT_PROG, "Empirically lower-bound the ε of a privlin trainer on digits (rows at unit norm).",
                   epilog="Exit status: 0 every claim consistent, 3 an audit proved a claim false, 2 a usage error.")
    p.add_argument("--method", default="gaussian_sum", choices=sorted({*AUDITS, *ESTIMATOR_METHODS, "all"}),
                   help=f"canary audit: one of {sorted(AUDITS)}; with --one-run: one of "
                        f"{list(ESTIMATOR_METHODS)} (DPLinearClassifier with its defaults); 'all': every one")
    p.add_argument("--epsilon", type=cli.Interval(float, 0, math.inf, closed="neither"), nargs="+", default=[1.0],
                   help="claimed ε values to audit")
    p.add_argument("--delta", type=cli.Interval(float, 0, 1, closed="neither"), default=1e-5)
    p.add_argument("--runs", type=cli.Interval(int, 16), default=1000,
                   help="canary audit: training runs, half with the canary")
    p.add_argument("--one-run", action="store_true",
                   help="one-run audit (Steinke, Nasr & Jagielski 2023): one fit of the shipped estimator with "
                        "--canaries Dirac canaries, each included with probability 1/2")
    p.add_argument("--canaries", type=cli.Interval(int, 2), default=1000, help="one-run audit: canaries")
    p.add_argument("--path", choices=("in-memory", "streamed", "secure"), default="in-memory",
                   help="one-run audit: the estimator's path (streamed: memory_limit=0; secure: secure_mode)")
    p.add_argument("--confidence", type=cli.Interval(float, 0, 1, closed="neither"), default=0.95)
    p.add_argument("--seed", type=int, default=0, help="seeds the audit's runs, canaries and split (reproducible)")
    p.add_argument("--json", action="store_true", help="one JSON object per audit instead of a table")
    p.add_argument("--no-progress", action="store_true", help="no progress lines")
    return p


def _audit_tasks(args) -> list[tuple[str, float]]:
    """(method, ε) pairs to audit; a method the chosen audit cannot run is a usage error."""
    import cliconv as cli

    from privlin.defaults import METHODS as ESTIMATOR_METHODS

    known = list(ESTIMATOR_METHODS) if args.one_run else sorted(AUDITS)
    methods = known if args.method == "all" else [args.method]
    if methods[0] not in known:
        other = "the canary audit (without --one-run)" if args.one_run else "--one-run"
        raise cli.UserError(f"--method {args.method} is for {other}; here choose from {known} or 'all'")
    return [(m, eps) for m in methods for eps in args.epsilon]


def _audit_one(args, method: str, epsilon: float) -> AuditResult:
    if not args.one_run:
        return audit_method(method, epsilon, delta=args.delta, runs=args.runs, seed=args.seed,
                            confidence=args.confidence)
    X, y = _digits()
    params = {"method": method, "epsilon": epsilon, "delta": args.delta,
              **{"in-memory": {}, "streamed": {"memory_limit": 0}, "secure": {"secure_mode": True}}[args.path]}
    return one_run_estimator_audit(params, X, y, canaries=args.canaries, seed=args.seed, delta=args.delta,
                                   confidence=args.confidence)


def _audit_row(method: str, res: AuditResult) -> str:
    top = f"  ceiling ε≤{res.ceiling:.3f}" if math.isfinite(res.ceiling) else ""
    verdict = "VIOLATED" if res.violated else "consistent"
    return (f"{method:<15s} claimed ε={res.epsilon_claimed:.3g}  audited lower bound ε≥{res.epsilon_lb:.3f}{top}  "
            f"({res.confidence:.0%} confidence, δ={res.delta:g})  attack: {res.attack}  -> {verdict}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m privlin.audit --method NAME --epsilon E [E ...] (--runs R | --one-run [--canaries M])``."""
    import cliconv as cli

    @cli.entry_point(AUDIT_PROG, (ValueError,))
    def run(argv):
        import json

        args = _audit_parser().parse_args(argv)
        tasks = _audit_tasks(args)
        kind = f"one-run audit, {args.canaries} canaries" if args.one_run else f"canary audit, {args.runs} runs"
        violated = False
        for i, (m, eps) in enumerate(tasks):
            with cli.status(f"[{i + 1}/{len(tasks)}] {m} at ε={eps:g} ({kind})", enabled=not args.no_progress):
                res = _audit_one(args, m, eps)
            violated |= res.violated
            print(json.dumps({"method": m, **res.as_dict()}) if args.json else _audit_row(m, res), flush=True)
        return 3 if violated else 0

    return run(argv)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
