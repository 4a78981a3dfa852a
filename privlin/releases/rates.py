"""The learning rate of DP training, from public facts: :func:`default_learning_rate` (when none is given), the
stability caps of heavy ball on rows at norm C (:func:`stability_caps`), and the rates a released curvature bound
lifts W's to (:func:`learning_rates`).  Here, beside the releases, because the curvature release decides whether
it is worth making from the very same terms (:mod:`privlin.releases.curvature`); :mod:`privlin.plan` re-exports
them."""
from __future__ import annotations

import math

import jax.numpy as jnp

from ..defaults import ADAM_LR, LOGIT_NOISE

__all__ = ["default_learning_rate", "stability_caps", "learning_rates", "noise_rate", "joint_cap"]


def default_learning_rate(method: str, optimizer: str, sigma: float, batch: float, *, steps: int = 100,
                          momentum: float = 0.9, clip: float = 1.0, fit_intercept: bool = False) -> float:
    """The learning rate when none is given, from public facts: σ, the expected batch B = q·N, T, β, C.

    SGD with heavy-ball momentum β (``sgd``, ``minibatch`` with optimizer ``"sgd"``)::

        lr = min( ρ·(1−β)·B / (σ·√T·C²) ,  4(1+β) / (C² + [intercept]) )        ρ = LOGIT_NOISE = 0.8

    * Noise term.  Each step adds N(0, (σC/B)²) per weight; with momentum the weights move lr/(1−β) times that,
      and after T steps the noise is a random walk of standard deviation ρ = lr·σ·√T / ((1−β)·B) per weight, i.e.
      ρ·C in the logit of a row at norm C, whatever d.  For a Lipschitz convex loss the step size of noisy
      gradient descent that balances optimization against noise makes this accumulated noise equal to the size
      of one coordinate of the solution, ‖W*‖/√(dk) (Bassily, Smith & Thakurta 2014, §5), independently of N and
      ε.  The rule fixes that size at ρ = 0.8, the value of DP-RandP's tuned probes (seed 004, Table 22:
      lr·σ/N ≈ 0.008 at T=100 for every ε from 0.1 to 8 — the rule gives exactly that table at its T).  How it
      holds on data it was not set on: BENCHMARKS.md, "privlin defaults on unseen data" (it is weakest at small
      N·μ, where a smaller rate, closer to the first gradient's direction, does better).  At a fixed ρ, the total
      step ``lr·T/(1−β) = ρ·B·√T/σ = ρ·N·μ_train`` (full batch) is what moves the model, so more steps at a
      smaller rate should give about the same model: T stays DP-RandP's 100, ten momentum time constants.  No
      rule for T from (N, d, σ) has been found that wins everywhere, so T is not derived (BENCHMARKS.md, "privlin
      defaults on unseen data").
    * Stability term.  With rows at norm C and an intercept feature 1, the mean softmax (or sigmoid) loss has a
      Hessian bounded by L = (C² + 1)/2 (C²/2 without intercept; the logits' Hessian is ≼ ½I); heavy ball is
      stable for lr·L < 2(1+β) (Polyak 1964).  It binds at large N·μ (little noise), where the noise rule alone would
      take steps that diverge; without noise (ε = ∞) it is the learning rate.
    * Clip C.  Rows are normalized to norm C and gradients clipped at C; the per-example gradient x·rᵀ has norm
      C·‖r‖ ≤ C√2, so C rescales signal and noise alike (logits move by lr·C² per unit step): the rule is written
      for C = 1 (the estimator's default) and divides by C², so any C trains the same model in logits (without
      an intercept; the intercept's feature is 1 whatever C).  At C = 1 with the intercept the per-example
      gradient norm at zero init, √(2(1 − 1/k)), is ≥ 1: every example is clipped from the first step
      (normalized per-example gradients, the regime Bu et al. 2023 recommend: no clip to tune).

    * Curvature.  The stability term assumes the worst case, rows all along one direction (second moment of top
      eigenvalue 1).  Centered, whitened rows are far flatter (≈ 1/d), and at large N·μ the cap, not the noise,
      then sets the rate and T=100 steps do not converge.  Where that is so, the plan buys a release of the top
      eigenvalue (:func:`.scaling.release_curvature`) and :func:`learning_rates` lifts W's cap from it, up
      to this rule's noise term.

    adam1 and Adam/LAMB: 1e-3 (Mehta et al. App. F.1; Adam's step does not scale with the gradient).
    """
    if method == "adam1" or optimizer != "sgd":
        return ADAM_LR
    return min(noise_rate(sigma, batch, steps=steps, momentum=momentum, clip=clip),
               joint_cap(momentum, clip, fit_intercept))


def joint_cap(momentum, clip, fit_intercept) -> float:
    """The stability term: one rate for W and b, worst-case rows (:func:`stability_caps` at curvature 1)."""
    return 2.0 * _heavy_ball_gain(momentum) / (clip**2 + (1.0 if fit_intercept else 0.0))


def _heavy_ball_gain(momentum) -> float:
    """2(1+β): heavy ball with momentum β is stable for lr·L below it (Polyak 1964)."""
    return 2.0 * (1.0 + momentum)


def noise_rate(sigma, batch, *, steps, momentum, clip) -> float:
    """The noise term of :func:`default_learning_rate` (inf without noise)."""
    if sigma == 0.0:
        return math.inf
    return LOGIT_NOISE * (1.0 - momentum) * batch / (sigma * math.sqrt(steps) * clip**2)


def stability_caps(curvature, *, momentum: float, clip: float, fit_intercept: bool):
    """(W's, b's) largest stable heavy-ball rates on rows at norm C whose directions' second moment has top
    eigenvalue ``curvature`` = λ ≤ 1 (a scalar; may be traced).

    The mean loss's Hessian is ≼ ½·E[(Cx, 1)(Cx, 1)ᵀ] (logits' Hessian ≼ ½I), stable for lr·L < 2(1+β) (Polyak 1964).
    One rate for all: L ≤ (C²λ + 1)/2, so λ=1 gives the joint cap 4(1+β)/(C² + 1).  A rate per block:
    [[A, B], [Bᵀ, D]] ≼ 2·diag(A, D) for a PSD matrix, so W at 2(1+β)/(C²λ) and b at 2(1+β) are stable together,
    whatever the rows' mean; taken where it beats the joint cap (λ well below 1).  Without an intercept
    W's cap is 4(1+β)/(C²λ).
    """
    gain = _heavy_ball_gain(momentum)  # lr·L below this is stable
    joint = joint_cap(momentum, clip, fit_intercept)
    if not fit_intercept:
        return 2.0 * gain / (clip**2 * curvature), joint
    block = gain / (clip**2 * curvature)
    return jnp.where(block > joint, block, joint), jnp.where(block > joint, gain, joint)


def learning_rates(ceiling, curvature, *, momentum: float, clip: float, fit_intercept: bool):
    """(W's, b's) learning rate of a plan with the curvature release, from the released ``curvature`` (an upper
    bound on the top eigenvalue of the rows' second moment; post-processing): each stability cap of
    :func:`stability_caps`, at most ``ceiling`` (the noise term).  Where the release shows no flatness the caps
    are the joint one and both rates are the plan's ``learning_rate``."""
    cap_w, cap_b = stability_caps(curvature, momentum=momentum, clip=clip, fit_intercept=fit_intercept)
    return jnp.minimum(ceiling, cap_w), jnp.minimum(ceiling, cap_b)
