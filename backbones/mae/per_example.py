"""Per-example gradients of the MAE loss, vectorized with ``torch.func``, and clipping.

This is the reference path (any model); :mod:`backbones.mae.ghost` is the fast
path that DP-MAE runs by default. :func:`clipped_grad_sum` dispatches.

DP-SGD needs each example's gradient norm before the examples are summed.
``vmap(grad(loss_of_one_example))`` computes all of them in one batched pass
(``functional_call`` makes the module a pure function of its parameters);
each example carries its own mask noise, so the vectorized result equals a
loop over examples.
"""
from __future__ import annotations

import contextlib

import torch
from torch.func import functional_call, grad_and_value, vmap

from .clipping import clip_factors, dropped, weighted_sum, zero_rows
from .ghost import ghost_clip_and_sum
from .settings import METHODS

__all__ = ["split_params", "per_example_grads", "per_example_norms", "clip_factors", "dropped", "zero_rows",
           "weighted_sum", "clip_and_sum", "clipped_grad_sum", "METHODS"]


def split_params(model: torch.nn.Module):
    """(trainable, frozen) dicts of the model's parameters and buffers, detached."""
    trainable = {k: p.detach() for k, p in model.named_parameters() if p.requires_grad}
    frozen = {k: p.detach() for k, p in model.named_parameters() if not p.requires_grad}
    frozen.update({k: b.detach() for k, b in model.named_buffers()})
    return trainable, frozen


def per_example_grads(model, trainable: dict, frozen: dict, imgs: torch.Tensor, mask_noise: torch.Tensor):
    """Per-example gradients of the MAE loss.

    Parameters
    ----------
    model : MaskedAutoencoder
        Only its structure is used; parameter values come from ``trainable``/``frozen``.
    trainable, frozen : dict[str, torch.Tensor]
        See :func:`split_params`.
    imgs : torch.Tensor, shape (B, C, H, W)
    mask_noise : torch.Tensor, shape (B, L)

    Returns
    -------
    grads : dict[str, torch.Tensor], each of shape (B, *param.shape)
    losses : torch.Tensor, shape (B,)
    """

    def loss_one(params, img, noise):
        return functional_call(model, (params, frozen), (img[None], noise[None]))[0]

    grads, losses = vmap(grad_and_value(loss_one), in_dims=(None, 0, 0))(trainable, imgs, mask_noise)
    return grads, losses


def per_example_norms(grads: dict) -> torch.Tensor:
    """L2 norm of each example's full gradient (all parameters together): (B,)."""
    sq = sum(g.reshape(g.shape[0], -1).pow(2).sum(dim=1) for g in grads.values())
    return sq.sqrt()


def clip_and_sum(grads: dict, clip: float, finite: torch.Tensor | None = None):
    """Clip each example's gradient to norm ``clip`` and sum over examples.

    Each example is scaled by :func:`clip_factors` (0 for a non-finite one, or where ``finite`` is False); the
    per-example clipped gradients are never stored, only their sum.

    Returns
    -------
    summed : dict[str, torch.Tensor], each of shape param.shape
    norms : torch.Tensor, shape (B,)
        Norms before clipping.
    """
    norms = per_example_norms(grads)
    scale = clip_factors(norms, clip, finite)
    rows = dropped(scale)
    summed = {k: weighted_sum(scale, g, rows) for k, g in grads.items()}
    return summed, norms


def clipped_grad_sum(model, imgs: torch.Tensor, mask_noise: torch.Tensor, clip: float, *, method: str = "ghost",
                     autocast_dtype: torch.dtype | None = None):
    """Clipped per-example gradient sum of a physical batch, by ``method``.

    ``"ghost"`` (:func:`backbones.mae.ghost.ghost_clip_and_sum`): mixed ghost
    norms + book-keeping, no per-example gradient stored; refuses (raises
    :class:`backbones.mae.ghost.UnsupportedModuleError`) a model with a
    parameter it does not know. ``"vmap"``: the reference, ``vmap(grad)``
    over examples then :func:`clip_and_sum`; any model.

    Returns
    -------
    summed : dict[str, torch.Tensor]
        Per trainable parameter, its shape.
    norms : torch.Tensor, shape (B,)
        Per-example gradient norms before clipping. An example whose norm or loss is not finite contributed
        exactly nothing to ``summed`` (:func:`clip_factors`).
    losses : torch.Tensor, shape (B,)
    """
    if method == "ghost":
        return ghost_clip_and_sum(model, imgs, mask_noise, clip, autocast_dtype=autocast_dtype)
    if method != "vmap":
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    trainable, frozen = split_params(model)
    amp = (torch.autocast(imgs.device.type, dtype=autocast_dtype) if autocast_dtype is not None
           else contextlib.nullcontext())
    with amp:
        grads, losses = per_example_grads(model, trainable, frozen, imgs, mask_noise)
    grads = {k: g.float() for k, g in grads.items()}
    summed, norms = clip_and_sum(grads, clip, finite=torch.isfinite(losses))
    return summed, norms, losses.detach()
