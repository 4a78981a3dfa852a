"""DP trainers for linear classifiers: small pure jittable pieces (optax style).

Why it is cheap: for a linear model with logits ``z = x W + b`` the
per-example gradient is the outer product ``x r^T`` (``r = dloss/dz``), so its
norm is ``||x|| * ||r||`` (``sqrt(||x||² + 1) * ||r||`` with an intercept).
It is summed as (direction of the row) ⊗ (its residual times the clipped norm),
exactly (:mod:`privlin.sensitivity`): a released sum moves by at most C when one
example changes, in the arithmetic that computes it.  Trace these functions under
``privlin.sensitivity.x64()``.
Clipping is one scale per row, and the clipped sum is one GEMM
``X^T (c * R)``: per-example gradients are never materialized.

Pieces (all pure; keys and noise multipliers are arguments, so ``jax.vmap``
runs many (key, σ, lr) settings at once and an audit vmaps over seeds):

* :func:`clipped_grad_sum` — Σ_i clip_C(∇ℓ_i) for one block of rows (mask drops padding).
* :func:`privatize` — add N(0, (σC)²) to every coordinate, fresh key per leaf.
* ``adam1`` (Mehta et al., seed 003): single full-batch DP-Adam step from zero
  init, bias init −10, sigmoid CE.  From zero init every example's residual
  has the same norm, so the whole gradient is a function of per-class sums of
  clipped rows.  Two stages, so a sweep does the data pass once:

  1. :func:`class_sums_init` / :func:`class_sums_update` — one streaming pass
     accumulating :class:`ClassSums` (per-class Σ c_i x_i and Σ c_i);
  2. :func:`adam1_step` — gradient from the sums, noise, one Adam step.

* ``sgd`` (DP-RandP, seed 004): full-batch DP-SGD with momentum, zero init; the
  intercept is trained where ``fit_intercept`` (the plan's default for sgd: its
  gradient is part of the clipped vector and gets noise with it), else held at
  its init: the clipped gradient sum (:func:`grad_block` per chunk) and :func:`noisy_update`, one step of
  :func:`privlin.steps.dp_step` (whatever loop runs the steps).
* ``minibatch``: Poisson-subsampled DP-SGD / DP-Adam / DP-LAMB: the same step on the rows of a
  :func:`poisson_mask`.

Shapes: ``X`` (n, d) float32, ``Y`` (n, k) one-hot float32, ``mask`` (n,) 0/1,
``W`` (d, k), ``b`` (k,).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import noise, sensitivity

__all__ = [
    "LinearParams", "ClassSums", "TrainState", "residuals", "logits_of", "clipped_grad_sum", "row_weights",
    "privatize", "init_params", "make_optimizer", "init_state", "noisy_update",
    "grad_clip", "grad_block", "grad_params", "zero_init_residual_norm", "poisson_mask", "SAMPLE_CHUNK",
    "class_sums_init", "class_sums_update", "adam1_gradient", "adam1_step",
    "decision_function", "LOSSES", "OPTIMIZERS", "public_fit", "PublicFit", "gained_cap",
    "average_weights",
]

LOSSES = ("sigmoid", "softmax")
OPTIMIZERS = ("sgd", "adam", "lamb")
_TINY = 1e-12


class LinearParams(NamedTuple):
    """Weights ``W`` (d, k) and intercept ``b`` (k,)."""

    W: jax.Array
    b: jax.Array


class ClassSums(NamedTuple):
    """Sufficient statistics of ``adam1``: per-class sums of clip factors times rows, exact, float64.

    ``S`` (k, d+1): Σ_{i in class j} c_i [x_i, 1]; the last column (Σ c_i) feeds a trained intercept.
    """

    S: jax.Array


class TrainState(NamedTuple):
    """Parameters and optimizer state between steps."""

    params: LinearParams
    opt_state: optax.OptState


def init_params(d: int, k: int, bias_init: float = 0.0) -> LinearParams:
    """Zero weights (Mehta et al.: zero init is crucial under DP) and a constant intercept."""
    return LinearParams(jnp.zeros((d, k), jnp.float32), jnp.full((k,), bias_init, jnp.float32))


def decision_function(params: LinearParams, X) -> jax.Array:
    """Logits ``X W + b``, shape (n, k)."""
    return jnp.asarray(X, jnp.float32) @ params.W + params.b


def residuals(logits, Y, loss: str) -> jax.Array:
    """dℓ/dz for sigmoid (one-vs-rest) or softmax cross-entropy; shape (n, k)."""
    if loss == "sigmoid":
        return jax.nn.sigmoid(logits) - Y
    if loss == "softmax":
        return jax.nn.softmax(logits, axis=-1) - Y
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")


def logits_of(params: LinearParams, A, norms, fit_intercept: bool) -> jax.Array:
    """``x W + b`` from a row's direction and norm, never NaN (a huge row saturates instead of overflowing)."""
    W = jnp.concatenate([params.W, params.b[None]], axis=0) if fit_intercept else params.W
    aw = A @ W
    z = jnp.where(aw == 0, 0.0, norms[:, None] * aw)
    z = jnp.clip(z, -1e30, 1e30)
    return z if fit_intercept else z + params.b


def clipped_grad_sum(params: LinearParams, X, Y, mask, clip, n, *, loss: str = "softmax",
                     fit_intercept: bool = False, row_norm: float | None = None, class_weight=None) -> LinearParams:
    """Σ_i mask_i · w_{y_i} · clip_C(∇_θ ℓ(θ; x_i, y_i)) exactly (float64), without per-example gradients.

    ``n`` is the public N (it sets the exact-sum grid and the clip margin, :mod:`privlin.sensitivity`).
    ``row_norm``: every row is normalized to this norm (nothing to recompute).  ``class_weight``: public weights
    w_c ≤ 1 per class (None: 1), applied before the snapping, so a row still moves the sum by at most C.

    Returns
    -------
    LinearParams
        ``W`` (d, k) and ``b`` (k,) sums, float64 (``b`` is zero when ``fit_intercept`` is False).
    """
    d1, k = X.shape[1] + (1 if fit_intercept else 0), Y.shape[1]
    c_eff = grad_clip(clip, n, d1, k)
    G = sensitivity.chunked(lambda G, X, Y, mask: grad_block(G, X, Y, mask, params, c_eff, n, clip=clip, loss=loss,
                                                             fit_intercept=fit_intercept, row_norm=row_norm,
                                                             class_weight=class_weight),
                            jnp.zeros((d1, k), jnp.float64), X, Y, mask)
    return grad_params(G, fit_intercept)


def grad_clip(clip, n, d1: int, k: int):
    """The norm a row's gradient is clipped to so that, as summed, it moves the sum by at most ``clip``
    (:func:`privlin.sensitivity.margin` of an outer product of a ``d1``- and a ``k``-vector)."""
    return clip * (1.0 - sensitivity.margin(n, d1, outer_dims=k))


def grad_block(G, X, Y, mask, params: LinearParams, c_eff, n, gain=None, *, clip, loss: str, fit_intercept: bool,
               row_norm, class_weight):
    """``G`` + the clipped gradient sum of one chunk of rows, each gradient clipped to ``c_eff``
    (:func:`grad_clip`): the block function of :func:`clipped_grad_sum` and of a driver's gradient total.
    ``gain``: a public factor each gradient is multiplied by before the clip (``public_clip``: the clip then binds
    at ``c_eff / gain``); None: none."""
    A, norms = sensitivity.directions(X, fit_intercept, norm=row_norm)
    R = residuals(logits_of(params, A, norms, fit_intercept), Y, loss)
    if gain is not None:
        R = R * gain
    r_norm = jnp.sqrt(jnp.sum(R * R, axis=1))
    magnitude = jnp.minimum(norms, c_eff / jnp.maximum(r_norm, _TINY))  # c_i ||x_i||, the clipped norm
    if class_weight is not None:
        magnitude = magnitude * row_weights(Y, class_weight)
    return G + sensitivity.outer_sum(A, R * magnitude[:, None], mask, clip, n)


def grad_params(G, fit_intercept: bool) -> LinearParams:
    """A gradient sum ``G`` of :func:`grad_block` as ``LinearParams``: W, and the intercept's row or zeros."""
    if fit_intercept:
        return LinearParams(G[:-1], G[-1])
    return LinearParams(G, jnp.zeros((G.shape[1],), G.dtype))


def row_weights(Y, class_weight) -> jax.Array:
    """Each row's class weight (m,) from one-hot ``Y`` and the public per-class weights (a row of no class: 0)."""
    return jnp.asarray(Y, jnp.float32) @ jnp.asarray(class_weight, jnp.float32)


def privatize(grad_sum: LinearParams, key, sigma, clip, *, fit_intercept: bool = False) -> LinearParams:
    """Add Gaussian noise of std ``sigma * clip`` to every coordinate (fresh keys for W and b).

    The intercept gets noise only when it is trained (its gradient is part of the clipped vector).
    """
    kw, kb = noise.split(key)
    W = grad_sum.W + noise.gaussian(kw, grad_sum.W.shape, sigma * clip)
    b = grad_sum.b + noise.gaussian(kb, grad_sum.b.shape, sigma * clip) if fit_intercept else grad_sum.b
    return LinearParams(jnp.asarray(W, jnp.float32), jnp.asarray(b, jnp.float32))


def make_optimizer(name: str, learning_rate, *, momentum: float = 0.9, b1: float = 0.9, b2: float = 0.999,
                   eps: float = 1e-8) -> optax.GradientTransformation:
    """optax optimizer by name: ``"sgd"`` (heavy-ball momentum), ``"adam"`` or ``"lamb"``.

    ``learning_rate`` may be a traced value (vmap over learning rates).
    """
    if name == "sgd":
        return optax.sgd(learning_rate, momentum=momentum)
    if name == "adam":
        return optax.adam(learning_rate, b1=b1, b2=b2, eps=eps)
    if name == "lamb":
        return optax.lamb(learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=0.0)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")


def init_state(d: int, k: int, opt: optax.GradientTransformation, bias_init: float = 0.0) -> TrainState:
    params = init_params(d, k, bias_init)
    return TrainState(params, opt.init(params))


def noisy_update(state: TrainState, grad_sum: LinearParams, key, sigma, denom, opt: optax.GradientTransformation,
                 *, clip, fit_intercept: bool = False, intercept_scale=1.0) -> TrainState:
    """One DP step: noise on the clipped sum, divide by the public ``denom`` (N, or q·N), optimizer update.

    ``intercept_scale`` multiplies the intercept's noisy gradient: with SGD (linear in the gradient) the intercept
    then steps at ``intercept_scale`` × the rate (its own stability cap, :func:`privlin.plan.learning_rates`).
    """
    g = privatize(grad_sum, key, sigma, clip, fit_intercept=fit_intercept)
    g = jax.tree.map(lambda t: t / denom, g)
    g = LinearParams(g.W, g.b * intercept_scale if fit_intercept else jnp.zeros_like(g.b))
    updates, opt_state = opt.update(g, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    if not fit_intercept:  # LAMB's trust ratio / weight decay must not move a frozen intercept
        params = LinearParams(params.W, state.params.b)
    return TrainState(params, opt_state)


#: Rows per Poisson-sampling chunk: row i of a step is drawn from chunk i // SAMPLE_CHUNK's own key, so a
#: streamed pass (any block size) and an in-memory pass draw the same sample.
SAMPLE_CHUNK = 4096


def poisson_mask(key, sample_rate, start, length: int) -> jax.Array:
    """The Poisson sample of global rows ``[start, start + length)``: float32 0/1, each row in with prob. q.

    Row i's draw depends only on ``key`` and ``i`` (not on how the rows are blocked).
    """
    first = start // SAMPLE_CHUNK
    chunks = length // SAMPLE_CHUNK + 2
    ids = first + jnp.arange(chunks)
    bits = jax.vmap(lambda c: noise.bernoulli(noise.fold_in(key, c), sample_rate, (SAMPLE_CHUNK,)))(ids)
    return jax.lax.dynamic_slice(bits.reshape(-1), (start - first * SAMPLE_CHUNK,), (length,)).astype(jnp.float32)


# --------------------------------------------------------------------------- adam1 (Mehta et al.)

def zero_init_residual_norm(k: int, loss: str = "sigmoid", bias_init: float = -10.0) -> float:
    """``||r_i||`` at zero weights and constant intercept: the same for every example.

    sigmoid: r = p·1 − e_y with p = sigmoid(b0); softmax: p = 1/k.
    """
    p = 1.0 / (1.0 + jnp.exp(-bias_init)) if loss == "sigmoid" else 1.0 / k
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    return jnp.sqrt((1.0 - p) ** 2 + (k - 1) * p**2)


def class_sums_init(d: int, k: int) -> ClassSums:
    return ClassSums(jnp.zeros((k, d + 1), jnp.float64))


def class_sums_update(acc: ClassSums, X, Y, mask, clip, n, *, loss: str = "sigmoid", bias_init: float = -10.0,
                      fit_intercept: bool = False, row_norm: float | None = None, center=None,
                      class_weight=None) -> ClassSums:
    """Add one block of rows to the ``adam1`` statistics exactly (stage 1; one streaming pass).

    At zero init every residual has the same norm r, so the clip factor is ``min(1, C / (||x_i|| r))``
    and the class sums of ``c_i [x_i, 1]`` determine the whole clipped gradient (:func:`adam1_gradient`).
    ``row_norm``: the model's rows are ``X − center`` re-normalized to this norm (``X`` at that norm, ``center`` the
    last released mean, or None where ``X`` are the model's rows), as :func:`privlin.releases.preprocess.apply` makes
    them; None: ``X`` as given.  ``class_weight``: public weights ≤ 1 per class scale each row's contribution (None: 1).
    Summed by :func:`privlin.sensitivity.offsets_sum`, so settings vmapped over their centers share one pass over the
    rows.
    """
    k = Y.shape[1]
    r = zero_init_residual_norm(k, loss, bias_init)
    # a row's whole contribution ≤ C/r, less r's rounding and adam1_gradient's float64 rounding of p·Σ_j S_j
    bound = clip * (1.0 - k * sensitivity.U32 - (k + 2) * jnp.asarray(n, jnp.float64) * 2.0**-50) / r
    mask = mask * jnp.sum(Y, axis=1)
    weight = 1.0 if class_weight is None else row_weights(Y, class_weight).astype(jnp.float64)
    if row_norm is None:  # rows as given: each its own direction, clipped to the bound
        A, norms = sensitivity.directions(X, fit_intercept)
        S = sensitivity.offsets_sum(A, mask, None, jnp.minimum(norms, bound) * weight, bound, bound, n, Y)
        if not fit_intercept:  # keep the layout (k, d+1): the intercept column stays zero
            S = jnp.concatenate([S, jnp.zeros((k, 1), S.dtype)], axis=1)
        return ClassSums(acc.S + S)
    # every row's contribution [direction of x_i − c, 1]·mag/full has norm mag: the direction part by offsets_sum
    # (its weight mag·row_norm/full / ‖u_i − c‖), the intercept part snapped to 22 bits (× a count: exact)
    full = math.sqrt(row_norm * row_norm + 1.0) if fit_intercept else row_norm
    mag = jnp.minimum(full, bound * (1.0 - 2.0**-21))
    feat = mag * (row_norm / full)
    u = jnp.asarray(X, jnp.float32) * jnp.float32(1.0 / row_norm)
    c = None if center is None else jnp.asarray(center, jnp.float64) / row_norm
    cap = feat / _least_distance(c)
    S = sensitivity.offsets_sum(u, mask, c, feat * weight, cap, feat, n, Y)
    if fit_intercept:
        iota = mag / full * (1.0 if class_weight is None else jnp.asarray(class_weight, jnp.float64))
        grid = sensitivity.pow2_64(jnp.ceil(jnp.log2(mag / full)) - 22.0)  # ι/grid ≤ 2²², × a count ≤ 2³⁰: exact
        counts = jnp.sum(jnp.asarray(Y, jnp.float64) * jnp.asarray(mask, jnp.float64)[:, None], axis=0)
        S = jnp.concatenate([S, (counts * jnp.round(iota / grid) * grid)[:, None]], axis=1)
    else:
        S = jnp.concatenate([S, jnp.zeros((k, 1), S.dtype)], axis=1)
    return ClassSums(acc.S + S)


#: A row this close to the center (rows at norm 1) gets at most the weight of one this far: its contribution is
#: shorter than the others' (the weights' grid would otherwise be coarse for every row).
NEAREST = 2.0**-6


def _least_distance(c):
    """The least distance from a unit row (or a zero row) to the center ``c`` that the weights' grid covers."""
    if c is None:
        return 1.0 - 2.0**-10
    norm = jnp.sqrt(jnp.sum(c * c))
    return jnp.maximum(jnp.minimum(jnp.abs(1.0 - norm), norm) * (1.0 - 2.0**-10), NEAREST)


def adam1_gradient(sums: ClassSums, *, loss: str = "sigmoid", bias_init: float = -10.0) -> LinearParams:
    """The exact clipped full-batch gradient sum at zero init, from the class sums (float64).

    Σ_i c_i [x_i, 1] (p·1 − e_{y_i})^T = p·(Σ_j S_j) 1^T − S^T.
    """
    k = sums.S.shape[0]
    p = jax.nn.sigmoid(jnp.asarray(bias_init, jnp.float64)) if loss == "sigmoid" else 1.0 / k
    total = jnp.sum(sums.S, axis=0)
    G = p * total[:, None] - sums.S.T
    return LinearParams(G[:-1], G[-1])


def adam1_step(sums: ClassSums, n, key, sigma, learning_rate, *, clip: float = 1.0, loss: str = "sigmoid",
               bias_init: float = -10.0, fit_intercept: bool = False, eps: float = 1e-8,
               b1: float = 0.9, b2: float = 0.999) -> LinearParams:
    """Stage 2 of ``adam1``: noise the gradient, divide by N, take one Adam step from zero init.

    Pure and cheap (no data): vmap it over (key, σ, lr) after one pass of stage 1.
    The first Adam step is ``-lr · g / (|g| + eps)`` (bias-corrected), ≈ signSGD (Mehta et al. App. E).
    """
    g = privatize(adam1_gradient(sums, loss=loss, bias_init=bias_init), key, sigma, clip, fit_intercept=fit_intercept)
    return adam1_update(g, n, learning_rate, bias_init=bias_init, fit_intercept=fit_intercept, eps=eps,
                        b1=b1, b2=b2)


def adam1_update(noisy_grad_sum: LinearParams, n, learning_rate, *, bias_init: float = -10.0,
                 fit_intercept: bool = False, eps: float = 1e-8, b1: float = 0.9, b2: float = 0.999) -> LinearParams:
    """The data-free end of ``adam1``: divide the released gradient sum by the public N, one Adam step from zero init.

    Separate from :func:`adam1_step` so the noise can come from elsewhere (``secure_mode``'s discrete Gaussian).
    """
    d, k = noisy_grad_sum.W.shape
    g = jax.tree.map(lambda t: t / n, noisy_grad_sum)
    if not fit_intercept:
        g = LinearParams(g.W, jnp.zeros_like(g.b))
    noisy_grad_sum = jax.tree.map(lambda t: jnp.asarray(t, jnp.float32), noisy_grad_sum)
    opt = make_optimizer("adam", learning_rate, b1=b1, b2=b2, eps=eps)
    state = init_state(d, k, opt, bias_init)
    updates, _ = opt.update(g, state.opt_state, state.params)
    return optax.apply_updates(state.params, updates)


# ----------------------------------------------------------------------------- the warm start from public rows

class PublicFit(NamedTuple):
    """:func:`public_fit`'s model, ``W`` (d', k) and ``b`` (k,), and ``held_out_norm``: the typical gradient norm
    of a fresh row at the start (``public_clip``): a public row's gradient norm (as the DP steps compute it, before
    any clip) under the fold's model that did not see it, averaged within each class, then over the k classes
    alike (no class frequency is assumed); a class with no public row counts at the public rows' mean ‖(z, 1)‖,
    the least a row of a class the start gives no weight has (its residual norm is about 1 or more)."""

    W: jax.Array
    b: jax.Array
    held_out_norm: jax.Array


def gained_cap(gain, *, momentum: float, clip: float, fit_intercept: bool):
    """The largest stable heavy-ball rate for gradients multiplied by ``gain`` ≥ 1 before the clip at C
    (``public_clip``).  A row's loss Hessian is ‖(x, 1)‖²·H_z with λ_max(H_z) ≤ min(½, 2‖r‖) (softmax or
    sigmoid: ≤ its trace ≤ 2‖r‖), and a row the clip leaves alone has gain·‖r‖·‖(x, 1)‖ ≤ C; so the gained
    gradient's Lipschitz constant is at most min(gain·‖(x, 1)‖²/2, 2·C·‖(x, 1)‖) (a clipped row's is taken as no
    larger; tests/test_public_clip.py checks the bound by finite differences), and heavy ball is stable below
    2(1+β) over it (Polyak 1964).  At gain 1 it is the plan's joint cap or above."""
    norm2 = clip * clip + (1.0 if fit_intercept else 0.0)
    return 2.0 * (1.0 + momentum) / jnp.minimum(gain * norm2 / 2.0, 2.0 * clip * math.sqrt(norm2))


def public_fit(Z, idx, mask, k: int, *, loss: str, fit_intercept: bool, bias_init: float, grid=None,
               folds: int | None = None, iterations: int | None = None) -> PublicFit:
    """A non-private L2 logistic regression on labelled PUBLIC rows, the DP steps' start (``public_start``).

    ``Z`` (m, d') public rows in the model's coordinates, ``idx`` (m,) class indices, ``mask`` (m,) 1 for real rows;
    the model's ``loss`` (softmax, or one-vs-rest sigmoid), with the intercept trained where ``fit_intercept`` (else
    held at ``bias_init``).  The L2 strength is chosen from ``grid`` (inverse strengths C, scikit-learn's scale) by
    the mean held-out log-loss over ``folds`` folds of the public rows (row i of the real rows in fold i mod folds),
    then refitted on all of them.  Classes absent from the public rows keep weight 0 and intercept ``bias_init``
    (nothing is known of them).  ``held_out_norm`` (:class:`PublicFit`): at the chosen strength, each row's gradient
    norm ‖r‖·‖(z, 1)‖ under the model of the fold that left it out, averaged per class, then over the classes.  Each fit is ``iterations`` accelerated gradient steps at the step size of a bound on
    the loss's curvature; where the rows are fewer than d' the fit runs in their span (the optimum lies in it), so
    the cost is set by min(m, d').  Pure, jittable; reads only its arguments.
    """
    from . import defaults

    grid = jnp.asarray(defaults.PUBLIC_START_C if grid is None else grid, jnp.float32)
    folds = defaults.PUBLIC_START_FOLDS if folds is None else int(folds)
    iterations = defaults.PUBLIC_START_ITERATIONS if iterations is None else int(iterations)
    Z = jnp.asarray(Z, jnp.float32)
    mask = jnp.asarray(mask, jnp.float32)
    m, d = Z.shape
    Y = jax.nn.one_hot(idx, k, dtype=jnp.float32) * mask[:, None]
    present = Y.sum(0) > 0
    Z = Z * mask[:, None]
    basis = None
    if m < d:  # the span of the rows: W = Q W', ‖W‖ = ‖W'‖
        basis, _ = jnp.linalg.qr(Z.T)  # (d, m)
        Z = Z @ basis
    F = jnp.concatenate([Z, jnp.ones((m, 1), jnp.float32)], axis=1) if fit_intercept else Z
    fold = jnp.mod(jnp.cumsum(mask) - 1, folds) * mask - (1 - mask)  # -1: padding
    train = jnp.stack([mask * (fold != f) for f in range(folds)] + [mask])  # (folds + 1, m)
    count = jnp.maximum(train.sum(1), 1.0)
    curv = 0.5 if loss == "softmax" else 0.25
    top = jnp.linalg.eigvalsh((F.T * mask) @ F / jnp.maximum(mask.sum(), 1.0))[-1]  # a fold's ≤ (m/m_f)·this

    def row_loss(logits, Y):
        if loss == "softmax":
            z = jnp.where(present, logits, -jnp.inf)
            return jax.nn.logsumexp(z, axis=-1) - jnp.sum(Y * jnp.where(present, logits, 0.0), axis=-1)
        per = jnp.logaddexp(0.0, logits) - Y * logits
        return jnp.sum(jnp.where(present, per, 0.0), axis=-1)

    def logits_of(theta):
        W = theta[:Z.shape[1]]
        b = theta[Z.shape[1]] if fit_intercept else jnp.full((k,), bias_init, jnp.float32)
        return Z @ W + b

    def fit(weights, n_w, c):
        lam = 1.0 / (c * n_w)

        def objective(theta):
            W = theta[:Z.shape[1]]
            return jnp.sum(weights * row_loss(logits_of(theta), Y)) / n_w + 0.5 * lam * jnp.sum(W * W)

        grad = jax.grad(objective)
        step = 1.0 / (curv * top * jnp.maximum(mask.sum(), 1.0) / n_w * 1.05 + lam)
        theta0 = jnp.zeros((F.shape[1], k), jnp.float32)

        def body(i, state):
            theta, prev = state
            y = theta + (i / (i + 3.0)) * (theta - prev)
            return y - step * grad(y), theta

        theta = jax.lax.fori_loop(0, iterations, body, (theta0, theta0))[0]
        return jnp.where(present, theta, 0.0)

    thetas = jax.vmap(lambda c: jax.vmap(fit, in_axes=(0, 0, None))(train, count, c))(grid)  # (C, folds+1, ., k)
    held = [jnp.sum(mask * (fold == f) * row_loss(jax.vmap(logits_of)(thetas[:, f]), Y), axis=1)
            for f in range(folds)]
    score = sum(held)  # (C,): the held-out log-loss summed over every public row once
    best = jnp.argmin(score)
    theta = thetas[best, folds]

    def intercept(theta):  # as the returned model has it: absent classes at bias_init
        return jnp.where(present, theta[Z.shape[1]], bias_init) if fit_intercept else jnp.full((k,), bias_init)

    def model_logits(theta):
        return Z @ theta[:Z.shape[1]] + intercept(theta)

    norms = jnp.sqrt(jnp.sum(Z * Z, axis=1) + (1.0 if fit_intercept else 0.0))
    grad_norm = sum(jnp.where(fold == f, jnp.linalg.norm(residuals(model_logits(thetas[best, f]), Y, loss), axis=1),
                              0.0) for f in range(folds)) * norms
    counts = Y.sum(0)  # (k,): Y is masked
    absent = jnp.sum(mask * norms) / jnp.maximum(mask.sum(), 1.0)  # a row of a class the start cannot predict: ‖r‖ ≥ ~1
    per_class = jnp.where(present, (Y * grad_norm[:, None]).sum(0) / jnp.maximum(counts, 1.0), absent)
    held_out_norm = jnp.mean(per_class)
    W = theta[:Z.shape[1]]
    W = W if basis is None else basis @ W
    b = intercept(theta)
    return PublicFit(W.astype(jnp.float32), b.astype(jnp.float32), held_out_norm.astype(jnp.float32))


def average_weights(steps: int, average) -> np.ndarray | None:
    """The weight of each of ``steps`` iterates in the returned model (summing to 1), or None (the last iterate).

    ``average`` (public, so the weights are): 0, the last iterate; a share a in (0, 1], the uniform mean of the
    last ⌈a·steps⌉ iterates (tail / Polyak averaging); ``"ema"``, an exponential moving average with span half the
    steps (β = 1 − 2/(steps/2 + 1), bias-corrected as De et al. 2022).  Why: near an optimum each full-batch
    step's noise stays in the last iterate; a mean over steps cuts its variance, at no privacy cost."""
    if isinstance(average, str):
        if average != "ema":
            raise ValueError(f"average={average!r}: give a share of the steps in [0, 1] or 'ema'")
        if steps <= 1:  # one iterate: nothing to average, as for a share
            return None
        beta = 1.0 - 2.0 / (steps / 2.0 + 1.0)
        w = (1.0 - beta) * beta ** np.arange(steps - 1, -1, -1, dtype=np.float64)
        return w / w.sum()
    a = float(average)
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"average={average!r}: the share of the steps averaged is in [0, 1]")
    m = math.ceil(a * steps)
    if m <= 1:
        return None
    w = np.zeros(steps)
    w[steps - m:] = 1.0 / m
    return w
