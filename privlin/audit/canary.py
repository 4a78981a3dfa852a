"""The canary audit (see :mod:`privlin.audit`): a trainer run many times, vmapped over seeds, with a canary and
with a null row in its place, the attacks that score its outputs, and the reference Gaussian-sum trainer."""
from __future__ import annotations

import math
import time
from typing import Callable, Mapping

import numpy as np

from .bounds import AuditResult, threshold_audit


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
