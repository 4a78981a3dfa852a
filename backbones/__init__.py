"""Frozen backbones by name: architecture, weights (never downloaded), preprocessing and pooling heads.

::

    import backbones
    backbones.list_backbones()        # ['pixels', 'syn_vip_base', 'vip_base', 'vip_large', 'vip_toy', ...]
    bb = backbones.load_backbone("vip_base", head="blocks", weights="ckpt-vip-laion233m-base.pth")
    feats = bb.model(uint8_images)    # (B, 36864)

Weights come from ``weights=PATH``, else ``$PRIVLIN_WEIGHTS_DIR/<file>``, else a clear error naming the file.
"""
from .build import Backbone, build_architecture, load_backbone
from .checkpoints import (WEIGHTS_DIR_ENV, CheckpointMismatchError, WeightsNotFoundError, read_checkpoint,
                          resolve_weights, sha256_file)
from .heads import BLOCK_TOKENS
from .registry import BackboneConfig, Preprocessing, get_config, list_backbones, register

__all__ = ["Backbone", "BackboneConfig", "Preprocessing", "load_backbone", "build_architecture", "get_config",
           "list_backbones", "register", "read_checkpoint", "resolve_weights", "sha256_file",
           "WeightsNotFoundError", "CheckpointMismatchError", "WEIGHTS_DIR_ENV", "BLOCK_TOKENS"]
