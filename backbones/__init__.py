"""Frozen backbones by name: architecture, weights, preprocessing and pooling heads.

::

    import backbones
    backbones.list_backbones()        # ['pixels', 'syn_vip_base', 'vip_base', 'vip_large', 'vip_toy', ...]
    bb = backbones.load_backbone("vip_base", head="blocks", weights="ckpt-vip-laion233m-base.pth")
    feats = bb.model(uint8_images)    # (B, 36864)
    bb = backbones.load_backbone("vit_base_patch16_224.augreg_in21k", head="cls")   # any timm name, from the HF cache

Registry names take weights from ``weights=PATH``, else ``$PRIVLIN_WEIGHTS_DIR/<file>``, else a clear error naming
the file; timm names and ``hf-hub:org/name`` take them from the Hugging Face cache (:mod:`backbones.hub`).
The registry and the error types import without torch (a command line answers ``--help`` before loading it); the
rest loads on first use.
"""
from __future__ import annotations

from .errors import CheckpointMismatchError, WeightsNotFoundError
from .lazy import lazy_exports
from .registry import (WEIGHTS_DIR_ENV, BackboneConfig, Preprocessing, check_name, get_config, list_backbones,
                       register)

#: Public name -> the module that defines it (torch-bound: loaded on first use).
_LAZY = {"Backbone": "build", "build_architecture": "build", "load_backbone": "build",
         "read_checkpoint": "checkpoints", "resolve_weights": "weights_file", "sha256_file": "checkpoints",
         "BLOCK_TOKENS": "heads", "is_hub_name": "hub"}

__all__ = ["Backbone", "BackboneConfig", "Preprocessing", "load_backbone", "build_architecture", "get_config",
           "list_backbones", "check_name", "register", "read_checkpoint", "resolve_weights", "sha256_file",
           "is_hub_name",
           "WeightsNotFoundError", "CheckpointMismatchError", "WEIGHTS_DIR_ENV", "BLOCK_TOKENS"]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
