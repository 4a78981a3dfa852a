"""Masked autoencoder (MAE) on timm's VisionTransformer, in the ViP checkpoint layout.

The model *is* a timm ``VisionTransformer`` (the encoder) with the decoder
attached under ``decoder_*`` names and a ``mask_token``. Its ``state_dict`` is
therefore already the ViP / MAE release layout: the encoder keys are exactly
those of a plain timm ViT, so a released encoder loads with
``load_state_dict(strict=True)`` after the decoder keys are dropped.

Masking takes its randomness as an input (``mask_noise``), one row per
example: the mask is part of each example's computation, which keeps
per-example gradients (``vmap``) and a per-example loop identical, and lets
training resume bit for bit.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import torch
from torch import nn
from timm.models.vision_transformer import Block, VisionTransformer

from .config import MAE_SIZES, MAEConfig  # torch-free: the command line checks a size name before torch loads

__all__ = [
    "MAEConfig",
    "MAE_SIZES",
    "MaskedAutoencoder",
    "build_mae",
    "encoder_from_mae",
    "encoder_state_dict",
    "sincos_pos_embed",
    "patchify",
    "random_masking",
]


def sincos_pos_embed(embed_dim: int, grid_size: int, cls_token: bool = True) -> torch.Tensor:
    """Fixed 2-D sine-cosine position embedding of MAE.

    Returns
    -------
    torch.Tensor, shape (1, grid_size**2 + cls_token, embed_dim)
        The class-token row (first, when ``cls_token``) is zero.
    """
    if embed_dim % 4:
        raise ValueError(f"embed_dim must be a multiple of 4 for 2-D sincos, got {embed_dim}")

    def one_axis(dim, pos):
        omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    gw, gh = np.meshgrid(np.arange(grid_size, dtype=np.float64), np.arange(grid_size, dtype=np.float64))
    emb = np.concatenate([one_axis(embed_dim // 2, gh), one_axis(embed_dim // 2, gw)], axis=1)
    if cls_token:
        emb = np.concatenate([np.zeros((1, embed_dim)), emb], axis=0)
    return torch.from_numpy(emb).float().unsqueeze(0)


def patchify(imgs: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, L, p*p*C), patches in row-major order, pixels (p, p, C) as MAE."""
    b, c, h, w = imgs.shape
    p = patch_size
    x = imgs.reshape(b, c, h // p, p, w // p, p)
    x = torch.einsum("nchpwq->nhwpqc", x)
    return x.reshape(b, (h // p) * (w // p), p * p * c)


def random_masking(x: torch.Tensor, num_visible: int, mask_noise: torch.Tensor):
    """Keep the ``num_visible`` patches with the smallest noise, per example.

    Parameters
    ----------
    x : torch.Tensor, shape (B, L, D)
    num_visible : int
    mask_noise : torch.Tensor, shape (B, L)
        Uniform noise; each row decides its example's mask.

    Returns
    -------
    x_visible : (B, num_visible, D)
    mask : (B, L) float, 1 for hidden patches
    ids_restore : (B, L) long, un-shuffles the decoder sequence
    """
    ids_shuffle = torch.argsort(mask_noise, dim=1)
    ids_restore = torch.argsort(ids_shuffle, dim=1)
    ids_keep = ids_shuffle[:, :num_visible]
    x_visible = torch.gather(x, 1, ids_keep.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
    mask = (ids_restore >= num_visible).to(x.dtype)  # no in-place writes: vmap-friendly
    return x_visible, mask, ids_restore


class MaskedAutoencoder(VisionTransformer):
    """MAE whose encoder is a timm ViT; ``forward`` returns per-example losses.

    The position embeddings are the fixed sin-cos ones of MAE (not trained).
    ``state_dict()`` is the ViP release layout: encoder keys as timm ViT,
    decoder keys ``decoder_*`` and ``mask_token``.
    """

    def __init__(self, cfg: MAEConfig):
        super().__init__(**cfg.timm_kwargs())
        self.cfg = cfg
        grid = cfg.img_size // cfg.patch_size
        norm = partial(nn.LayerNorm, eps=1e-6)
        with torch.no_grad():
            self.pos_embed.copy_(sincos_pos_embed(cfg.embed_dim, grid))
        self.pos_embed.requires_grad_(False)

        dd = cfg.decoder_embed_dim
        self.decoder_embed = nn.Linear(cfg.embed_dim, dd)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dd))
        self.decoder_pos_embed = nn.Parameter(sincos_pos_embed(dd, grid), requires_grad=False)
        self.decoder_blocks = nn.ModuleList(
            [Block(dd, cfg.decoder_num_heads, cfg.mlp_ratio, qkv_bias=True, norm_layer=norm)
             for _ in range(cfg.decoder_depth)])
        self.decoder_norm = norm(dd)
        self.decoder_pred = nn.Linear(dd, cfg.patch_size ** 2 * cfg.in_chans)
        self._init_decoder()
        # The math attention path has batching rules under torch.func.vmap+grad everywhere;
        # the fused kernel is used by the exported plain encoder at inference time.
        for m in self.modules():
            if hasattr(m, "fused_attn"):
                m.fused_attn = False

    def _init_decoder(self):
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.mask_token, std=0.02)
        w = self.patch_embed.proj.weight.data
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        for name, m in self.named_modules():
            if name.startswith("decoder") and isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward_encoder(self, imgs: torch.Tensor, mask_noise: torch.Tensor):
        """Encode the visible patches. Returns latent (B, 1 + V, D), mask (B, L), ids_restore (B, L)."""
        x = self.patch_embed(imgs) + self.pos_embed[:, 1:, :]
        x, mask, ids_restore = random_masking(x, self.cfg.num_visible, mask_noise)
        cls = (self.cls_token + self.pos_embed[:, :1, :]).expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        x = self.blocks(x)
        return self.norm(x), mask, ids_restore

    def forward_decoder(self, latent: torch.Tensor, ids_restore: torch.Tensor) -> torch.Tensor:
        """Predict every patch. Returns (B, L, p*p*C)."""
        x = self.decoder_embed(latent)
        b, L = ids_restore.shape
        mask_tokens = self.mask_token.expand(b, L + 1 - x.shape[1], -1)
        x_ = torch.cat([x[:, 1:, :], mask_tokens], dim=1)
        x_ = torch.gather(x_, 1, ids_restore.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        x = torch.cat([x[:, :1, :], x_], dim=1) + self.decoder_pos_embed
        for blk in self.decoder_blocks:
            x = blk(x)
        return self.decoder_pred(self.decoder_norm(x))[:, 1:, :]

    def reconstruction_loss(self, imgs, pred, mask) -> torch.Tensor:
        """Mean squared error on the hidden patches, one value per example: (B,)."""
        target = patchify(imgs, self.cfg.patch_size)
        if self.cfg.norm_pix_loss:
            mean = target.mean(dim=-1, keepdim=True)
            var = target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1e-6) ** 0.5
        per_patch = ((pred - target) ** 2).mean(dim=-1)
        return (per_patch * mask).sum(dim=1) / mask.sum(dim=1)

    def forward(self, imgs: torch.Tensor, mask_noise: torch.Tensor) -> torch.Tensor:
        """Per-example MAE losses.

        Parameters
        ----------
        imgs : torch.Tensor, shape (B, C, H, W)
        mask_noise : torch.Tensor, shape (B, L)
            Uniform [0, 1) noise, one row per example (see :func:`random_masking`).

        Returns
        -------
        torch.Tensor, shape (B,)
        """
        latent, mask, ids_restore = self.forward_encoder(imgs, mask_noise)
        pred = self.forward_decoder(latent, ids_restore)
        return self.reconstruction_loss(imgs, pred, mask)


def build_mae(size: str | MAEConfig = "vip_toy", **overrides) -> MaskedAutoencoder:
    """Build a MAE by size name (``MAE_SIZES``) or config, with optional field overrides."""
    if isinstance(size, str):
        if size not in MAE_SIZES:
            raise KeyError(f"unknown MAE size {size!r}; known: {sorted(MAE_SIZES)}")
        cfg = MAE_SIZES[size]
    else:
        cfg = size
    return MaskedAutoencoder(cfg.replace(**overrides) if overrides else cfg)


def _is_decoder_key(key: str) -> bool:
    return key.startswith("decoder_") or key == "mask_token"


def encoder_state_dict(state: dict) -> dict:
    """Drop the decoder keys of a MAE state dict (ViP layout) -> plain timm ViT keys."""
    return {k: v for k, v in state.items() if not _is_decoder_key(k)}


def encoder_from_mae(mae: MaskedAutoencoder) -> VisionTransformer:
    """A plain timm ``VisionTransformer`` carrying the MAE's encoder weights (strict load)."""
    vit = VisionTransformer(**mae.cfg.timm_kwargs())
    vit.load_state_dict(encoder_state_dict(mae.state_dict()), strict=True)
    return vit.eval()
