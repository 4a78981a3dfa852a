"""Named frozen backbones as data: architecture, weights file and format, preprocessing, pooling heads.

Configs are plain frozen dataclasses (timm's ``PretrainedCfg`` idea): the feature store records them in its
attributes, so a reader knows exactly which network and which pixels produced the numbers. Reading a config
never touches the network or the disk.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.util
import json
import os
import re
from dataclasses import dataclass, field

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF = (0.5, 0.5, 0.5)

#: The environment variable naming a directory of weights files (looked up by file name).
WEIGHTS_DIR_ENV = "PRIVLIN_WEIGHTS_DIR"
WEIGHT_FORMATS = ("none", "mae_pth", "timm", "jax_npz", "auto")
VIT_HEADS = ("cls", "gap", "blocks")
ARCHS = ("vit", "pixels", "timm")


@dataclass(frozen=True)
class Preprocessing:
    """Pixels as the checkpoint was trained on: resize the shorter side, center crop, normalize.

    Attributes
    ----------
    resize : int
        Target of the shorter side before cropping (``torchvision.transforms.Resize(resize)``).
    crop : int
        Side of the square center crop: the network's input size.
    interpolation : {"bicubic", "bilinear", "nearest"}
    mean, std : tuple of 3 floats
        Per-channel normalization of [0, 1] RGB pixels.
    """

    resize: int
    crop: int
    interpolation: str = "bicubic"
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD

    def as_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class BackboneConfig:
    """One named backbone.

    Attributes
    ----------
    name : str
    arch : {"vit", "pixels", "timm"}
        ``"vit"`` builds ``timm.models.vision_transformer.VisionTransformer(**arch_kwargs)``;
        ``"pixels"`` is the identity on preprocessed pixels (a baseline without weights);
        ``"timm"`` is ``timm.create_model(arch_kwargs["model_name"], **model_args)`` for a timm or ``hf-hub:``
        name (:mod:`backbones.hub`; ``arch_kwargs`` also records timm's pretrained config).
    arch_kwargs : dict
        Constructor arguments, spelled out (no hidden timm defaults beyond the class signature).
    timm_reference : str or None
        The registered timm model with the same architecture (tests check the shapes agree).
    weights_format : {"none", "mae_pth", "timm", "jax_npz", "auto"}
        How the weights file is laid out; ``"auto"`` decides by file suffix and keys.
    weights_file : str or None
        File name looked up in ``$PRIVLIN_WEIGHTS_DIR`` when no path is given.
    weights_source : str
        Where a user can obtain the file (a registry file is never downloaded; a timm or hub name's is
        ``hf-hub:REPO[@REV]``, read through the Hugging Face cache).
    bundled : bool
        The weights file ships inside ``backbones/weights/``.
    preprocessing : Preprocessing
    heads : tuple of str
        Pooling heads this backbone supports; the first is the default.
    description : str
    """

    name: str
    arch: str
    arch_kwargs: dict = field(default_factory=dict)
    timm_reference: str | None = None
    weights_format: str = "none"
    weights_file: str | None = None
    weights_source: str = ""
    bundled: bool = False
    preprocessing: Preprocessing = Preprocessing(resize=224, crop=224)
    heads: tuple = VIT_HEADS
    description: str = ""

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        if self.weights_format not in WEIGHT_FORMATS:
            raise ValueError(f"weights_format must be one of {WEIGHT_FORMATS}, got {self.weights_format!r}")
        if not self.heads:
            raise ValueError("a backbone needs at least one head")

    @property
    def default_head(self) -> str:
        return self.heads[0]

    def as_dict(self) -> dict:
        """JSON-ready description, recorded in store attributes: exactly its JSON round trip (tuples as lists, as
        timm's ``pretrained_cfg`` holds them), so the store's copy compares equal to a rerun's."""
        out = dataclasses.asdict(self)
        out["preprocessing"] = self.preprocessing.as_dict()
        out["heads"] = list(self.heads)
        return json.loads(json.dumps(out))


def _vit(patch, dim, depth, heads, img=224, **extra) -> dict:
    # The constructor arguments of timm's vit_{base,large,huge}_patch{16,14}_224, spelled out; num_classes=0 and
    # global_pool="token" make forward() return the final-norm class token, the `cls` head.
    return dict(img_size=img, patch_size=patch, embed_dim=dim, depth=depth, num_heads=heads, mlp_ratio=4.0,
                qkv_bias=True, class_token=True, global_pool="token", num_classes=0, **extra)


# ViP (MAE) linear probing evaluates at Resize(256, bicubic) + CenterCrop(224) with ImageNet mean/std
# (ViP-MAE main_linprobe.py, same as MAE).
_MAE_PIXELS = Preprocessing(resize=256, crop=224, interpolation="bicubic", mean=IMAGENET_MEAN, std=IMAGENET_STD)
# Google ViT ImageNet-21k checkpoints: inputs in [-1, 1]; timm's pretrained config (crop_pct 0.9, bicubic).
_GOOGLE_PIXELS = Preprocessing(resize=248, crop=224, interpolation="bicubic", mean=HALF, std=HALF)

_VIP_URL = "https://github.com/facebookresearch/ViP-MAE (README, 'DP Pre-trained ViP checkpoints')"
_VIT_URL = "gs://vit_models/imagenet21k/ (google-research/vision_transformer) or the timm hub tag"

_REGISTRY: dict[str, BackboneConfig] = {}


def register(config: BackboneConfig, *, overwrite: bool = False) -> BackboneConfig:
    """Add a backbone config under ``config.name`` (e.g. a tiny variant for tests or a new checkpoint)."""
    if not isinstance(config, BackboneConfig):
        raise TypeError(f"expected a BackboneConfig, got {type(config).__name__}")
    if config.name in _REGISTRY and not overwrite:
        raise ValueError(f"backbone {config.name!r} is already registered (pass overwrite=True to replace it)")
    _REGISTRY[config.name] = config
    return config


def get_config(name: str) -> BackboneConfig:
    """The config registered under ``name`` (a deep copy: callers cannot change the registry by accident)."""
    try:
        return copy.deepcopy(_REGISTRY[name])
    except KeyError:
        raise KeyError(f"unknown backbone {name!r}; known backbones: {list_backbones()}, any timm model name "
                       "(timm.list_models(pretrained=True)) or hf-hub:ORG/NAME") from None


def list_backbones() -> list[str]:
    return sorted(_REGISTRY)


def check_name(name: str) -> None:
    """Refuse a name that is no backbone (the :func:`get_config` error) without importing torch or timm, so a typo
    is reported at once: a registry name, ``hf-hub:...``, or an architecture timm registers (``arch`` or
    ``arch.tag``; its tag is checked when timm loads)."""
    if name in _REGISTRY or name.startswith("hf-hub:") or name.split(".", 1)[0] in _timm_architectures():
        return
    get_config(name)


def _timm_architectures() -> frozenset:
    """The model names timm registers, read from its source (each ``@register_model`` function) instead of by
    importing it (seconds: torch): the same set as ``timm.list_models()`` (tests/test_backbones.py holds them
    equal). Empty without timm."""
    return frozenset(_timm_model_files())


def _timm_source(arch: str) -> str:
    """The text of the timm source file that registers ``arch`` ("" if timm does not), read without importing
    timm."""
    path = _timm_model_files().get(arch)
    if path is None:
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


@functools.lru_cache(maxsize=1)
def _timm_model_files() -> dict:
    """Each model name timm registers -> the source file that registers it (empty without timm)."""
    spec = importlib.util.find_spec("timm")
    if spec is None or spec.origin is None:
        return {}
    folder = os.path.join(os.path.dirname(spec.origin), "models")
    files: dict[str, str] = {}
    for entry in os.scandir(folder):
        if entry.name.endswith(".py"):
            with open(entry.path, encoding="utf-8") as f:
                for name in re.findall(r"@register_model(?:\([^)]*\))?\s*\ndef (\w+)\(", f.read()):
                    files.setdefault(name, entry.path)
    return files


for _cfg in (
    BackboneConfig(
        name="vip_base", arch="vit", arch_kwargs=_vit(16, 768, 12, 12), timm_reference="vit_base_patch16_224",
        weights_format="mae_pth", weights_file="ckpt-vip-laion233m-base.pth", weights_source=_VIP_URL,
        preprocessing=_MAE_PIXELS,
        description="ViP-Base: ViT-B/16 MAE trained with DP (eps=8) on LAION-233M after Shaders-21k warm start"),
    BackboneConfig(
        name="vip_large", arch="vit", arch_kwargs=_vit(16, 1024, 24, 16), timm_reference="vit_large_patch16_224",
        weights_format="mae_pth", weights_file="ckpt-vip-laion233m-large.pth", weights_source=_VIP_URL,
        preprocessing=_MAE_PIXELS,
        description="ViP-Large: ViT-L/16 DP-MAE (the ViP paper's scaling study; file name of your own copy)"),
    BackboneConfig(
        name="syn_vip_base", arch="vit", arch_kwargs=_vit(16, 768, 12, 12), timm_reference="vit_base_patch16_224",
        weights_format="mae_pth", weights_file="ckpt-vip-syn-base.pth", weights_source=_VIP_URL,
        preprocessing=_MAE_PIXELS,
        description="(Syn)-ViP-Base: ViT-B/16 MAE trained on synthetic Shaders-21k images only (no private data)"),
    BackboneConfig(
        name="vit_b16_in21k", arch="vit", arch_kwargs=_vit(16, 768, 12, 12), timm_reference="vit_base_patch16_224",
        weights_format="auto", weights_file="ViT-B_16.npz", weights_source=_VIT_URL, preprocessing=_GOOGLE_PIXELS,
        description="ViT-B/16 supervised on ImageNet-21k (Google release; .npz, or timm .safetensors/.pth)"),
    BackboneConfig(
        name="vit_l16", arch="vit", arch_kwargs=_vit(16, 1024, 24, 16), timm_reference="vit_large_patch16_224",
        weights_format="auto", weights_file="ViT-L_16.npz", weights_source=_VIT_URL, preprocessing=_GOOGLE_PIXELS,
        description="ViT-L/16 supervised on ImageNet-21k (Google release; JFT weights load the same way)"),
    BackboneConfig(
        name="vit_h14", arch="vit", arch_kwargs=_vit(14, 1280, 32, 16), timm_reference="vit_huge_patch14_224",
        weights_format="auto", weights_file="ViT-H_14.npz", weights_source=_VIT_URL, preprocessing=_GOOGLE_PIXELS,
        description="ViT-H/14 supervised on ImageNet-21k (Google release; JFT weights load the same way)"),
    BackboneConfig(
        name="pixels", arch="pixels", arch_kwargs={}, weights_format="none",
        preprocessing=Preprocessing(resize=32, crop=32, interpolation="bilinear", mean=HALF, std=HALF),
        heads=("flat",), description="Identity: resized pixels in [-1, 1], flattened (3*32*32 = 3072-d baseline)"),
    BackboneConfig(
        name="pixels8", arch="pixels", arch_kwargs={}, weights_format="none",
        preprocessing=Preprocessing(resize=8, crop=8, interpolation="bilinear", mean=HALF, std=HALF),
        heads=("flat",), description="Identity: pixels at 8x8 in [-1, 1], flattened (3*8*8 = 192-d baseline)"),
    BackboneConfig(
        name="vip_toy", arch="vit", arch_kwargs=_vit(4, 128, 6, 4, img=32), timm_reference=None,
        weights_format="mae_pth", weights_file="vip_toy.pth", bundled=True,
        weights_source="backbones/weights/vip_toy.pth, trained by the project's DP-MAE code (backbones/mae)",
        preprocessing=Preprocessing(resize=32, crop=32, interpolation="bicubic"),
        description="Tiny ViT (32px, patch 4, dim 128, depth 6) shipped with the project for offline use"),
):
    register(_cfg)
