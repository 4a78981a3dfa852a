"""Pooling heads: how a frozen network's token grid becomes one feature vector per image.

* ``cls`` — the class token after the final norm (what timm returns with ``global_pool="token"``).
* ``gap`` — the mean of the patch tokens after the final norm (timm ``global_pool="avg"`` without fc_norm).
* ``blocks`` — DP-RandP's "principled feature extraction" (seed 004, App. G): the output of *every* block
  (before the final norm), all tokens including the class token, average-pooled over the token axis into
  ``BLOCK_TOKENS = 4`` segments (``torch.nn.functional.adaptive_avg_pool1d``), concatenated block by block:
  ``depth * 4 * D`` values (12 * 4 * 768 = 36864 for ViT-B). Row layout: ``[block, segment, channel]``.
* ``flat`` — the ``pixels`` baseline: the preprocessed image, flattened.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

BLOCK_TOKENS = 4


class PooledViT(nn.Module):
    """A frozen ViT-shaped timm model followed by one pooling head.

    Parameters
    ----------
    vit : torch.nn.Module
        A timm model whose ``forward_features`` returns the token sequence ``(B, N, D)`` after its final norm, with
        ``num_prefix_tokens`` (class and register tokens first) and ``blocks`` (each returning ``(B, N, D)``):
        ``VisionTransformer`` and its relatives (DeiT, BEiT, EVA, ...).
    head : {"cls", "gap", "blocks"}

    Forward: images ``(B, 3, H, W)`` -> features ``(B, dim)``.
    """

    def __init__(self, vit: nn.Module, head: str):
        super().__init__()
        if head not in ("cls", "gap", "blocks"):
            raise ValueError(f"unknown ViT head {head!r}; choose 'cls', 'gap' or 'blocks'")
        if head == "cls" and getattr(vit, "cls_token", None) is None:
            raise ValueError("head 'cls' needs a ViT with a class token")
        self.vit, self.head = vit, head
        width = vit.embed_dim
        self.dim = len(vit.blocks) * BLOCK_TOKENS * width if head == "blocks" else width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        vit = self.vit
        if self.head == "cls":
            return vit.forward_features(x)[:, 0]
        if self.head == "gap":
            return vit.forward_features(x)[:, vit.num_prefix_tokens:].mean(dim=1)
        # timm's own forward_features, each block's output pooled as it is made (a hook; only the pooled values
        # are kept, so memory does not grow with depth).
        pooled = []

        def pool(module, inputs, out):
            pooled.append(F.adaptive_avg_pool1d(out.transpose(1, 2), BLOCK_TOKENS))  # (B, D, 4)

        hooks = [block.register_forward_hook(pool) for block in vit.blocks]
        try:
            vit.forward_features(x)
        finally:
            for h in hooks:
                h.remove()
        return torch.stack(pooled, dim=1).transpose(2, 3).flatten(1)  # (B, depth, 4, D) -> (B, depth*4*D)


class FlatPixels(nn.Module):
    """The ``pixels`` baseline: ``(B, C, H, W)`` -> ``(B, C*H*W)``."""

    def __init__(self, channels: int, size: int):
        super().__init__()
        self.head, self.dim = "flat", channels * size * size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)
