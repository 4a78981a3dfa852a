"""Build a frozen backbone from its name: architecture + verified weights + head + preprocessing.

Registry names (:mod:`backbones.registry`) and timm / ``hf-hub:`` names (:mod:`backbones.hub`) differ only in where
the network and its weights come from; both end in the same frozen model (normalization + pooling head).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from . import hub
from .checkpoints import load_strict, read_checkpoint, resolve_weights, sha256_file, to_timm_state_dict
from .heads import FlatPixels, PooledViT
from .hub import is_hub_name
from .preprocessing import Normalize, geometry_transform
from .registry import BackboneConfig, get_config, list_backbones


def build_architecture(config: BackboneConfig) -> nn.Module:
    """The bare network of ``config`` with freshly initialized weights (load weights before use)."""
    if config.arch == "pixels":
        return nn.Identity()
    if config.arch == "timm":
        from .hub import build
        return build(config, config.arch_kwargs.get("pretrained_cfg", {}), None)
    from timm.models.vision_transformer import VisionTransformer
    return VisionTransformer(**config.arch_kwargs)


@dataclass
class Backbone:
    """A frozen, ready-to-run feature extractor.

    Attributes
    ----------
    config : BackboneConfig
    head : str
    model : torch.nn.Module
        ``uint8 (B, 3, crop, crop)`` -> ``float32 (B, dim)``; normalization included, eval mode, no grads.
    transform : callable
        PIL RGB image -> ``uint8 (3, crop, crop)`` tensor (runs in DataLoader workers).
    dim : int
    weights_path : Path or None
    weights_sha256 : str or None
    weights_origin : dict or None
        Where a hub file came from: ``repo``, ``revision`` (the commit), ``requested_revision``, ``file``.
    """

    config: BackboneConfig
    head: str
    model: nn.Module
    transform: object
    dim: int
    weights_path: Path | None
    weights_sha256: str | None
    weights_origin: dict | None = None

    def provenance(self) -> dict:
        """What the feature store records about the network that produced its features."""
        out = {"backbone": self.config.name, "backbone_config": self.config.as_dict(), "head": self.head,
               "dim": self.dim, "preprocessing": self.config.preprocessing.as_dict(),
               "weights_file": self.weights_path.name if self.weights_path else None,
               "weights_sha256": self.weights_sha256,
               "weights_privacy": weights_privacy(self.weights_path, self.weights_sha256)}
        if self.weights_origin is not None:
            out["weights_origin"] = dict(self.weights_origin)
        return out


def weights_privacy(path, sha256: str | None) -> dict | None:
    """The DP training record of weights trained on private data (DP-MAE's ``<stem>.json`` beside the file).

    A store of features then carries it, and privlin composes it with the store's items by its entry in the ledger
    home (``ledger_entry``, which holds the items it read).  The record must name these weights' sha256.
    """
    if path is None:
        return None
    meta_path = Path(path).with_suffix(".json")
    if not meta_path.exists():
        return None
    import json

    meta = json.loads(meta_path.read_text())
    privacy = meta.get("privacy") or {}
    if "dp_event" not in privacy:
        return None
    if meta.get("sha256") != sha256:
        raise ValueError(f"{meta_path} describes weights with sha256 {meta.get('sha256')}, not {path} ({sha256}): "
                         "the privacy record does not belong to these weights")
    return {"dataset": (meta.get("settings") or {}).get("data"), "n": privacy.get("n_private"),
            "dp_event": privacy["dp_event"], "epsilon": privacy.get("epsilon"), "delta": privacy.get("delta"),
            "neighbouring": "replace_special", "weights_sha256": sha256,
            "ledger_entry": privacy.get("ledger_entry")}


def load_backbone(backbone: str | BackboneConfig, *, head: str | None = None,
                  weights: str | os.PathLike | None = None) -> Backbone:
    """Build the named backbone with its weights loaded strictly, frozen, on the CPU.

    Parameters
    ----------
    backbone : str or BackboneConfig
        A registry name (see :func:`backbones.list_backbones`), a config, a timm model name
        (``vit_base_patch16_224.augreg_in21k``) or ``hf-hub:org/name[@revision]`` (see :mod:`backbones.hub`).
    head : str, optional
        One of ``config.heads``; default the first.
    weights : path, optional
        Weights file; default ``$PRIVLIN_WEIGHTS_DIR/<config.weights_file>`` (or the bundled file), or for a timm
        or hub name the repository's ``.safetensors`` file in the Hugging Face cache.

    Raises
    ------
    KeyError
        Unknown backbone name.
    ValueError
        Head not supported by this backbone.
    WeightsNotFoundError
        No weights file (the message says which file to put where, or how to fetch it into the HF cache).
    CheckpointMismatchError
        The file's keys/shapes do not fit the architecture (lists missing and unexpected keys).
    """
    if isinstance(backbone, str) and backbone not in list_backbones() and is_hub_name(backbone):
        config, pretrained_cfg = hub.config_for(backbone)
        head = _check_head(config, head)
        hub.probe(config)  # a model the heads cannot pool is refused before its weights are fetched
        config, path, origin = hub.weights_for(config, weights)
        net = hub.build(config, pretrained_cfg, path)
        return _assemble(config, head, net, path, sha256_file(path), origin)
    config = get_config(backbone) if isinstance(backbone, str) else backbone
    head = _check_head(config, head)
    path = resolve_weights(config, weights)
    net = build_architecture(config)
    sha = None
    if path is not None:
        raw = read_checkpoint(path)
        state, unexpected = to_timm_state_dict(raw, config)
        load_strict(net, state, source=repr(str(path)), unexpected_in_file=unexpected)
        sha = sha256_file(path)
    return _assemble(config, head, net, path, sha, None)


def _check_head(config: BackboneConfig, head: str | None) -> str:
    head = head or config.default_head
    if head not in config.heads:
        raise ValueError(f"backbone {config.name!r} has heads {list(config.heads)}, not {head!r}")
    return head


def _assemble(config: BackboneConfig, head: str, net: nn.Module, path, sha, origin) -> Backbone:
    """Normalization + pooling head around ``net``, frozen, in eval mode."""
    pre = config.preprocessing
    pooled = FlatPixels(3, pre.crop) if config.arch == "pixels" else PooledViT(net, head)
    model = nn.Sequential(Normalize(pre.mean, pre.std), pooled).eval().requires_grad_(False)
    return Backbone(config=config, head=head, model=model, transform=geometry_transform(pre), dim=pooled.dim,
                    weights_path=path, weights_sha256=sha, weights_origin=origin)
