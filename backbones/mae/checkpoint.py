"""Checkpoints in the ViP release layout, and the encoder export the registry loads.

A training checkpoint is ``{"model": MAE state dict (encoder keys as timm ViT,
decoder_* and mask_token), "optimizer", "step", "rng", "accountant", "config",
"history"}``: everything to resume the run. Its generator states are the
public ones (masks; batches of a non-private run): no secret key, sampler seed
or noise state is ever in it. It is still as private as the data (weights
before the end, an unnoised loss history); what gets released is
:func:`export_encoder`'s ``{"model": encoder only}``.

Writes are atomic (temporary file + ``os.replace``): a crash leaves the
previous checkpoint intact.
"""
from __future__ import annotations

import hashlib
import json
import os

import torch

from .model import MAEConfig, MaskedAutoencoder, encoder_state_dict

__all__ = ["save_checkpoint", "load_checkpoint", "export_encoder", "load_mae_weights", "sha256_file"]


def _atomic_save(obj, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_checkpoint(path: str, *, model: MaskedAutoencoder, optimizer, step: int, rng: dict,
                    accountant: dict | None, config: dict, history: list) -> None:
    """Write a resumable checkpoint atomically.

    Parameters
    ----------
    rng : dict[str, torch.Tensor]
        ``torch.Generator.get_state()`` of every generator of the run.
    accountant : dict or None
        :class:`backbones.mae.dp.DPAccountantState` as a dict (None when non-private).
    config : dict
        Training settings, including ``"mae"`` (the :class:`MAEConfig` fields).
    """
    _atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": int(step),
                  "rng": rng, "accountant": accountant, "config": config, "history": history}, path)


def load_checkpoint(path: str) -> dict:
    """Load a training checkpoint (tensors and plain Python only: ``weights_only=True``)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path!r}")
    return torch.load(path, map_location="cpu", weights_only=True)


def load_mae_weights(model: MaskedAutoencoder, path: str) -> list[str]:
    """Initialize ``model`` from a ViP-layout file (full MAE or encoder only).

    Returns the keys left at their fresh initialization (the decoder, when the
    file holds an encoder only). Encoder keys must all be present and match.
    """
    state = load_checkpoint(path)
    state = state.get("model", state)
    own = model.state_dict()
    missing_encoder = [k for k in encoder_state_dict(own) if k not in state]
    if missing_encoder:
        raise KeyError(f"{path!r} lacks encoder keys {missing_encoder[:5]}...")
    cast = {k: v.to(own[k].dtype) for k, v in state.items() if k in own}
    bad = [k for k, v in cast.items() if v.shape != own[k].shape]
    if bad:
        raise ValueError(f"{path!r} does not match the architecture: shape mismatch for {bad[:5]}")
    model.load_state_dict(cast, strict=False)
    return [k for k in own if k not in state]


def export_encoder(model: MaskedAutoencoder, path: str, dtype: torch.dtype = torch.float16,
                   provenance: dict | None = None) -> str:
    """Write ``{"model": encoder state dict}`` (ViP release layout) and its provenance JSON.

    The file loads with ``torch.load(weights_only=True)`` and, cast to float32,
    into ``timm VisionTransformer(**cfg.timm_kwargs())`` with ``strict=True``.

    Returns
    -------
    str
        The sha256 of the written file (also stored in ``<path>.json`` / ``<stem>.json``).
    """
    enc = {k: v.detach().to(dtype).clone() for k, v in encoder_state_dict(model.state_dict()).items()}
    _atomic_save({"model": enc}, path)
    digest = sha256_file(path)
    if provenance is not None:
        meta = dict(provenance)
        meta.update(file=os.path.basename(path), sha256=digest, dtype=str(dtype).replace("torch.", ""),
                    layout="ViP release: {'model': encoder keys in timm VisionTransformer layout}",
                    timm_kwargs=model.cfg.timm_kwargs())
        with open(os.path.splitext(path)[0] + ".json", "w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
            f.write("\n")
    return digest


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def config_from_dict(d: dict) -> MAEConfig:
    return MAEConfig(**d)
