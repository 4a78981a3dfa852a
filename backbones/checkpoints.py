"""Weights files: find them, read them without running code, map their keys to timm's ViT layout, load strictly.

Nothing here downloads. A file is read by a loader that cannot execute code from it
(``torch.load(weights_only=True)``, safetensors, ``np.load(allow_pickle=False)``), converted to a timm
``state_dict`` and loaded only if its keys and shapes match the architecture exactly: a partial load would
produce plausible-looking but meaningless features.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from .errors import CheckpointMismatchError, WeightsNotFoundError
from .weights_file import BUNDLED_DIR, resolve_weights  # noqa: F401 - checkpoints.resolve_weights, as before

# Keys an encoder does not use: MAE's decoder and mask token, classifier heads, the (removed) ViT pre-logits.
_DROP_PREFIXES = ("decoder_", "decoder.", "mask_token", "head.", "pre_logits.")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, streamed (recorded in the store so features can be traced to exact weights)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def tensor_sha256(obj) -> str:
    """Hex sha256 of a tree of tensors (dicts in their order, lists, scalars): names, dtypes, shapes and bytes.

    Stored beside the tensors it covers (``"tensor_sha256"`` in an exported DP-MAE encoder) and
    recomputed on load: a flipped byte in any tensor changes it.
    """
    digest = hashlib.sha256()

    def walk(x):
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            digest.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(x, dict):
            digest.update(f"D{len(x)}".encode())
            for k, v in x.items():
                walk(k)
                walk(v)
        elif isinstance(x, (list, tuple)):
            digest.update(f"L{len(x)}".encode())
            for v in x:
                walk(v)
        else:
            digest.update(f"S{type(x).__name__}:{x!r};".encode())

    walk(obj)
    return digest.hexdigest()


def read_checkpoint(path: str | os.PathLike) -> dict[str, np.ndarray | torch.Tensor]:
    """Raw ``{key: array}`` of a ``.pth/.pt/.bin``, ``.safetensors`` or ``.npz`` file, read without running code.

    A torch checkpoint wrapping its weights in ``{"model": ...}`` (MAE/ViP) or ``{"state_dict": ...}`` is unwrapped;
    one carrying ``"tensor_sha256"`` beside ``"model"`` (DP-MAE exports) is verified against it first.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        from safetensors.torch import load_file
        return dict(load_file(str(path), device="cpu"))
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    if suffix in (".pth", ".pt", ".bin", ".ckpt"):
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # pickle with code in it, or not a torch file at all
            raise ValueError(f"cannot read {str(path)!r} as a weights-only torch checkpoint: {e}") from e
        if isinstance(obj, dict) and "tensor_sha256" in obj and tensor_sha256(obj.get("model")) != obj["tensor_sha256"]:
            raise ValueError(f"{str(path)!r} is damaged: the sha256 of its tensors does not match the one stored "
                             f"in it")
        for wrapper in ("model", "state_dict", "module"):
            if isinstance(obj, dict) and isinstance(obj.get(wrapper), dict):
                obj = obj[wrapper]
                break
        if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise ValueError(f"{str(path)!r} does not hold a state dict of tensors")
        return dict(obj)
    raise ValueError(f"unknown weights file type {suffix!r} for {str(path)!r}: use .pth, .safetensors or .npz")


def _is_jax_layout(raw: dict) -> bool:
    return any("/" in k for k in raw)


def jax_to_timm(raw: dict[str, np.ndarray], depth: int) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Map a Google ViT / big_vision ``.npz`` to timm ``VisionTransformer`` keys.

    Supports the original ``vision_transformer`` layout (``Transformer/encoderblock_{i}/...``, optional
    ``opt/target/`` prefix) and big_vision's (``params/`` prefix, ``pos_embedding``, per-block or scanned
    ``encoderblock``). Returns the state dict and the npz keys no parameter consumed (the caller reports them).
    """
    prefix = next((p for p in ("opt/target/", "params/img/", "params/", "") if f"{p}embedding/kernel" in raw), None)
    if prefix is None:
        raise CheckpointMismatchError("npz has no 'embedding/kernel': not a ViT checkpoint",
                                      missing=["embedding/kernel"])
    w = {k[len(prefix):]: v for k, v in raw.items() if k.startswith(prefix)}
    used: set[str] = set()
    out: dict[str, torch.Tensor] = {}

    def take(key, idx=None):
        used.add(key)
        a = np.asarray(w[key])
        return a[idx] if idx is not None else a

    def put(name, a):
        out[name] = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))

    big_vision = "pos_embedding" in w or "Transformer/encoderblock/LayerNorm_0/scale" in w or \
        "Transformer/encoderblock_0/MlpBlock_0/Dense_0/kernel" in w
    put("patch_embed.proj.weight", take("embedding/kernel").transpose(3, 2, 0, 1))
    put("patch_embed.proj.bias", take("embedding/bias"))
    if "cls" in w:
        put("cls_token", take("cls"))
    pos_key = "pos_embedding" if "pos_embedding" in w else "Transformer/posembed_input/pos_embedding"
    if pos_key in w:
        put("pos_embed", take(pos_key))
    put("norm.weight", take("Transformer/encoder_norm/scale"))
    put("norm.bias", take("Transformer/encoder_norm/bias"))
    mha, mlp, ln2 = (0, 0, 1) if big_vision else (1, 3, 2)
    scanned = "Transformer/encoderblock/LayerNorm_0/scale" in w
    if scanned and np.asarray(w["Transformer/encoderblock/LayerNorm_0/scale"]).shape[0] != depth:
        n = np.asarray(w["Transformer/encoderblock/LayerNorm_0/scale"]).shape[0]
        raise CheckpointMismatchError(f"npz holds {n} scanned encoder blocks, the architecture has {depth}",
                                      mismatched=[f"encoderblock: {n} vs {depth}"])
    for i in range(depth):
        bp, idx = ("Transformer/encoderblock/", i) if scanned else (f"Transformer/encoderblock_{i}/", None)
        if f"{bp}LayerNorm_0/scale" not in w:
            break  # fewer blocks in the file than in the architecture: reported as missing keys below
        o, a = f"blocks.{i}.", f"{bp}MultiHeadDotProductAttention_{mha}/"
        put(o + "norm1.weight", take(f"{bp}LayerNorm_0/scale", idx))
        put(o + "norm1.bias", take(f"{bp}LayerNorm_0/bias", idx))
        # q/k/v kernels are (D, heads, head_dim): flatten to (D, D) and transpose to torch's (out, in).
        put(o + "attn.qkv.weight", np.concatenate(
            [take(f"{a}{n}/kernel", idx).reshape(take(f"{a}{n}/kernel", idx).shape[0], -1).T
             for n in ("query", "key", "value")]))
        put(o + "attn.qkv.bias", np.concatenate([take(f"{a}{n}/bias", idx).reshape(-1)
                                                 for n in ("query", "key", "value")]))
        out_k = take(f"{a}out/kernel", idx)  # (heads, head_dim, D)
        put(o + "attn.proj.weight", out_k.reshape(-1, out_k.shape[-1]).T)
        put(o + "attn.proj.bias", take(f"{a}out/bias", idx))
        put(o + "norm2.weight", take(f"{bp}LayerNorm_{ln2}/scale", idx))
        put(o + "norm2.bias", take(f"{bp}LayerNorm_{ln2}/bias", idx))
        for r in range(2):
            put(o + f"mlp.fc{r + 1}.weight", take(f"{bp}MlpBlock_{mlp}/Dense_{r}/kernel", idx).T)
            put(o + f"mlp.fc{r + 1}.bias", take(f"{bp}MlpBlock_{mlp}/Dense_{r}/bias", idx))
    unused = [prefix + k for k in w if k not in used and not k.startswith(("head/", "pre_logits/"))]
    unused += [k for k in raw if not k.startswith(prefix)]
    return out, sorted(unused)


def to_timm_state_dict(raw: dict, config: BackboneConfig) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Convert a raw checkpoint to timm ViT keys. Returns ``(state_dict, unexpected_keys_from_the_file)``."""
    fmt = config.weights_format
    if fmt == "jax_npz" or (fmt == "auto" and _is_jax_layout(raw)):
        return jax_to_timm(raw, depth=int(config.arch_kwargs.get("depth", 0)))
    if _is_jax_layout(raw):
        raise CheckpointMismatchError(f"backbone {config.name!r} expects a {fmt} checkpoint, got a JAX npz layout")
    state = {}
    for key, value in raw.items():
        key = key[len("module."):] if key.startswith("module.") else key
        if key.startswith(_DROP_PREFIXES):
            continue
        state[key] = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
    return state, []


def load_strict(model: torch.nn.Module, state: dict[str, torch.Tensor], *, source: str,
                unexpected_in_file=()) -> None:
    """Load ``state`` into ``model`` only if keys and shapes match exactly.

    Raises
    ------
    CheckpointMismatchError
        Listing missing keys, unexpected keys and shape mismatches.
    """
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected)) + list(unexpected_in_file)
    mismatched = sorted(f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}"
                        for k in set(state) & set(expected) if tuple(state[k].shape) != tuple(expected[k].shape))
    if missing or unexpected or mismatched:
        def show(keys):
            return ", ".join(keys[:3]) + (f", ... ({len(keys)} in all)" if len(keys) > 3 else "") or "none"
        raise CheckpointMismatchError(
            f"checkpoint {source} does not fit the architecture: missing keys: {show(missing)}; "
            f"unexpected keys: {show(unexpected)}; shape mismatches: {show(mismatched)}",
            missing=missing, unexpected=unexpected, mismatched=mismatched)
    with torch.no_grad():
        model.load_state_dict({k: v.to(expected[k].dtype) for k, v in state.items()}, strict=True)
