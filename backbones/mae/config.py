"""MAE architectures as data: :class:`MAEConfig` and the named sizes :data:`MAE_SIZES`.

Free of torch, so the command line (:mod:`backbones.mae.train`) names a wrong size before the model code loads;
:mod:`backbones.mae.model` builds from these.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["MAEConfig", "MAE_SIZES"]


@dataclass(frozen=True)
class MAEConfig:
    """Architecture of a MAE: the encoder is ``timm`` ViT, the decoder is light.

    Parameters
    ----------
    img_size, patch_size, in_chans : int
        Input geometry; ``img_size`` must be a multiple of ``patch_size``.
    embed_dim, depth, num_heads : int
        Encoder width, number of blocks, attention heads.
    mlp_ratio : float
        Hidden width of the MLPs relative to the width (encoder and decoder).
    decoder_embed_dim, decoder_depth, decoder_num_heads : int
        Decoder width, blocks and heads (paper: 512, 4, 16 for every encoder size).
    mask_ratio : float
        Fraction of patches hidden from the encoder (paper: 0.75).
    norm_pix_loss : bool
        Normalize each target patch by its own mean and variance (MAE default).
    """

    img_size: int = 32
    patch_size: int = 4
    in_chans: int = 3
    embed_dim: int = 128
    depth: int = 6
    num_heads: int = 4
    mlp_ratio: float = 4.0
    decoder_embed_dim: int = 64
    decoder_depth: int = 2
    decoder_num_heads: int = 4
    mask_ratio: float = 0.75
    norm_pix_loss: bool = True

    def __post_init__(self):
        if self.img_size % self.patch_size:
            raise ValueError(f"img_size={self.img_size} is not a multiple of patch_size={self.patch_size}")
        if not 0.0 <= self.mask_ratio < 1.0:
            raise ValueError(f"mask_ratio must be in [0, 1), got {self.mask_ratio}")
        if self.embed_dim % self.num_heads or self.decoder_embed_dim % self.decoder_num_heads:
            raise ValueError("embed_dim / decoder_embed_dim must be divisible by the number of heads")

    @property
    def num_patches(self) -> int:
        return (self.img_size // self.patch_size) ** 2

    @property
    def num_visible(self) -> int:
        """Patches the encoder sees per example, ``int(L * (1 - mask_ratio))`` as in MAE."""
        return int(self.num_patches * (1 - self.mask_ratio))

    def timm_kwargs(self) -> dict:
        """Keyword arguments of the plain timm ``VisionTransformer`` that is the encoder."""
        return dict(img_size=self.img_size, patch_size=self.patch_size, in_chans=self.in_chans,
                    embed_dim=self.embed_dim, depth=self.depth, num_heads=self.num_heads,
                    mlp_ratio=self.mlp_ratio, class_token=True, global_pool="token", num_classes=0)

    def replace(self, **changes) -> "MAEConfig":
        return dataclasses.replace(self, **changes)


_PAPER_DECODER = dict(decoder_embed_dim=512, decoder_depth=4, decoder_num_heads=16)

# Sizes as data. Paper sizes (ViP, Table 5): encoder depth x width, decoder 4 x 512;
# heads chosen at 64 dims per head. ``vip_toy`` is the shipped CPU model, ``toy`` is for tests.
MAE_SIZES: dict[str, MAEConfig] = {
    "toy": MAEConfig(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2,
                     decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=2),
    "vip_toy": MAEConfig(),
    "nano": MAEConfig(img_size=224, patch_size=16, embed_dim=192, depth=12, num_heads=3, **_PAPER_DECODER),
    "tiny": MAEConfig(img_size=224, patch_size=16, embed_dim=384, depth=12, num_heads=6, **_PAPER_DECODER),
    "small": MAEConfig(img_size=224, patch_size=16, embed_dim=576, depth=12, num_heads=9, **_PAPER_DECODER),
    "base": MAEConfig(img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, **_PAPER_DECODER),
    "large": MAEConfig(img_size=224, patch_size=16, embed_dim=1024, depth=24, num_heads=16, **_PAPER_DECODER),
}
