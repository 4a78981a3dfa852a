"""Any timm backbone by its timm name (``vit_base_patch16_224.augreg_in21k``) or ``hf-hub:org/name[@revision]``.

Weights load the way timm loads them: the file comes from the Hugging Face cache through ``huggingface_hub``
(downloaded only when the environment allows it; ``HF_HUB_OFFLINE=1`` never downloads, ``HF_HUB_CACHE`` /
``HF_HOME`` say where the cache is), and timm builds the model and loads it (``create_model(pretrained=True)``:
its own key filter, strict). Two differences, both on purpose: only ``.safetensors`` files are taken from the hub
(a pickled ``pytorch_model.bin`` can run code when read), and the file is resolved here so the store records the
repository, the commit it came from and its sha256. A local file (``weights=PATH``) always works instead.

Pixels follow timm's own preprocessing config (``timm.data.resolve_data_config``: input size, ``crop_pct``,
interpolation, mean, std), which :class:`~backbones.registry.Preprocessing` states exactly for timm's default
``center`` crop mode. The heads ``cls``, ``gap`` and ``blocks`` work on any ViT-shaped model (a token sequence
from ``forward_features``, a list of ``blocks``, ``num_prefix_tokens``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

from .errors import CheckpointMismatchError, WeightsNotFoundError
from .registry import VIT_HEADS, BackboneConfig, Preprocessing

HUB_PREFIX = "hf-hub:"
#: timm's pickled weight names and the safetensors file the hub holds beside them (timm's ``_get_safe_alternatives``).
_SAFE_ALTERNATIVES = {"pytorch_model.bin": "model.safetensors",
                      "open_clip_pytorch_model.bin": "open_clip_model.safetensors"}
#: pretrained_cfg fields that describe where the weights are, not what they are (never recorded).
_NOT_RECORDED = ("state_dict", "file", "url", "label_names", "label_descriptions", "license", "notes",
                 "paper_ids", "paper_name", "origin_url")
#: model_args of a hub config.json that would make timm read weights from elsewhere than the file loaded and
#: recorded here (e.g. ``pretrained_cfg_overlay = {"file": "x.pth"}``): refused, so provenance is the bytes loaded.
_LOADING_ARGS = ("pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "checkpoint_path", "cache_dir",
                 "pretrained_strict")


def is_hub_name(name: str) -> bool:
    """Whether ``name`` is ``hf-hub:...`` or a model timm knows (``arch`` or ``arch.tag``)."""
    if name.startswith(HUB_PREFIX):
        return True
    import timm

    return timm.is_model(name)


def _split_revision(hub_id: str) -> tuple[str, str | None]:
    repo, _, revision = hub_id.partition("@")
    return repo, revision or None


def _cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def cached_file(repo: str, filename: str, revision: str | None = None) -> Path | None:
    """``filename`` of ``repo`` at ``revision`` (default ``main``) if the Hugging Face cache holds it, else None.

    Read from the cache's layout (``models--ORG--NAME/refs/REVISION`` names a commit, ``snapshots/COMMIT/FILE``
    the file), so it answers without the network and without importing torch or timm.
    """
    root = Path(_cache_dir()) / f"models--{repo.replace('/', '--')}"
    revision = revision or "main"
    ref = root / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    path = root / "snapshots" / commit / filename
    return path if path.is_file() else None


def _not_cached(repo: str, filename: str, revision: str | None) -> WeightsNotFoundError:
    """The one-line error for a file the cache lacks where it may not be downloaded: what, where, how to fetch."""
    at = f"{repo}@{revision}" if revision else repo
    why = "HF_HUB_OFFLINE=1 forbids downloading" if _offline() else "the hub could not be reached"
    pickle_hint = ""
    if filename.endswith(".safetensors"):
        pickled = next((b for b, s in _SAFE_ALTERNATIVES.items() if s == filename), None)
        if pickled and cached_file(repo, pickled, revision) is not None:
            pickle_hint = (f" (the cache holds {pickled}, a pickle, which is not read from the hub: pass it as "
                           "--weights PATH if you trust it)")
    files = " ".join(dict.fromkeys(("config.json", "model.safetensors" if filename == "config.json" else filename)))
    return WeightsNotFoundError(
        f"{filename} of {at} is not in the Hugging Face cache {_cache_dir()} and {why}{pickle_hint}; fetch it "
        f"where the hub is reachable with `hf download {repo} {files}"
        f"{' --revision ' + revision if revision else ''}` (same HF_HUB_CACHE/HF_HOME), or pass --weights PATH")


def download(repo: str, filename: str, revision: str | None = None) -> Path:
    """``filename`` of hub repository ``repo`` from the HF cache (fetched only where the environment allows).

    Raises
    ------
    WeightsNotFoundError
        One line saying what is missing, where it looked and how to fetch it.
    """
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError

    at = f"{repo}@{revision}" if revision else repo
    try:
        return Path(hf_hub_download(repo, filename, revision=revision))
    except LocalEntryNotFoundError:
        raise _not_cached(repo, filename, revision) from None
    except EntryNotFoundError:
        raise WeightsNotFoundError(
            f"{at} has no {filename} on the hub; only safetensors are loaded from the hub (a pickled checkpoint can "
            "run code): download the weights yourself and pass --weights PATH") from None
    except (HfHubHTTPError, OSError) as e:  # unknown or gated repository, unknown revision, network
        message = " ".join(str(e).split())
        raise WeightsNotFoundError(f"cannot get {filename} of {at} from the Hugging Face hub: {message}") from None


def safe_filename(cfg: dict) -> str:
    """The safetensors file a timm pretrained config's weights are read from (``hf_hub_filename``, default timm's
    ``pytorch_model.bin``, taken as its safetensors alternative)."""
    filename = cfg.get("hf_hub_filename") or "pytorch_model.bin"
    return filename if filename.endswith(".safetensors") else _SAFE_ALTERNATIVES.get(
        filename, filename.rsplit(".", 1)[0] + ".safetensors")


def check_cached(name: str, weights=None) -> None:
    """Under ``HF_HUB_OFFLINE=1``, refuse a timm or ``hf-hub:`` name whose files the cache lacks, as :func:`download`
    would, but before torch and timm load (seconds): an ``hf-hub:`` repository's ``config.json`` and, without
    ``weights``, its safetensors file; an ``arch.tag`` timm name's file where timm's source names its repository.
    Anything this cannot tell without timm is left to the load (no false refusal)."""
    if not _offline():
        return
    if name.startswith(HUB_PREFIX):
        repo, revision = _split_revision(name[len(HUB_PREFIX):])
        config = cached_file(repo, "config.json", revision)
        if config is None:
            raise _not_cached(repo, "config.json", revision)
        try:
            cfg = json.loads(config.read_text()).get("pretrained_cfg") or {}
        except (ValueError, AttributeError, OSError):
            return  # not a timm config: the load names the fault
        filename = safe_filename(cfg if isinstance(cfg, dict) else {})
    else:
        found = _timm_source_cfg(name)
        if found is None:
            return
        repo, revision, filename = found
    if weights is None and cached_file(repo, filename, revision) is None:
        raise _not_cached(repo, filename, revision)


def _timm_source_cfg(name: str) -> tuple[str, str | None, str] | None:
    """``(repo, revision, safetensors file)`` of a tagged timm name, read from the ``'NAME': _cfg(...)`` entry of
    timm's model sources (what ``get_pretrained_cfg`` would return, without importing timm); None where the entry
    is not found or names no hub repository."""
    from .registry import _timm_source

    arch, dot, _ = name.partition(".")
    if not dot:
        return None  # the default tag is chosen by timm's registry
    text = _timm_source(arch)
    m = re.compile(r"^\s*['\"]" + re.escape(name) + r"['\"]\s*:\s*\w+\(", re.M).search(text)
    if m is None:
        return None
    # the entry must sit in a dict timm registers as written: ``x = generate_default_cfgs({...})`` or ``x = {...}``
    # later passed to ``generate_default_cfgs(x)`` (other tables' names may be rewritten before registering)
    opener = None
    for opener in re.finditer(r"^(\w+)[^=\n]*=\s*(generate_default_cfgs\(\s*)?\{", text[:m.start()], re.M):
        pass
    if opener is None or re.search(r"^[})]", text[opener.end():m.start()], re.M) or not (
            opener.group(2) or re.search(r"generate_default_cfgs\(\s*" + opener.group(1) + r"\s*\)", text)):
        return None
    nxt = re.compile(r"^\s*['\"][\w.\-]+['\"]\s*:", re.M).search(text, m.end())
    entry = re.sub(r"#[^\n]*", "", text[m.end():nxt.start() if nxt else len(text)])  # commented-out fields
    hub_id = re.search(r"hf_hub_id\s*=\s*['\"]([^'\"]+)['\"]", entry)
    if hub_id is None:
        return None
    hub = hub_id.group(1) + (name if hub_id.group(1) == "timm/" else "")  # as timm's registry completes it
    filename = re.search(r"hf_hub_filename\s*=\s*['\"]([^'\"]+)['\"]", entry)
    repo, revision = _split_revision(hub)
    return repo, revision, safe_filename({"hf_hub_filename": filename.group(1) if filename else None})


def resolve(name: str) -> tuple[str, dict, dict]:
    """``(architecture, model_args, pretrained_cfg)`` of a timm name or ``hf-hub:repo``, as timm resolves them.

    A timm name needs nothing but timm's registry; ``hf-hub:repo`` reads the repository's ``config.json`` from the
    cache (see :func:`download`).
    """
    import timm
    from timm.models import get_pretrained_cfg, split_model_name_tag

    if name.startswith(HUB_PREFIX):
        from timm.models._hub import load_model_config_from_hf

        repo, revision = _split_revision(name[len(HUB_PREFIX):])
        config_path = download(repo, "config.json", revision)  # what timm reads; named errors from here
        try:
            cfg, arch, model_args = load_model_config_from_hf(name[len(HUB_PREFIX):])
        except (KeyError, ValueError) as e:
            raise ValueError(f"{config_path} is not a timm model config ({type(e).__name__}: {e})") from None
        if not timm.is_model(arch):
            raise ValueError(f"{name}: config.json names architecture {arch!r}, which this timm "
                             f"({timm.__version__}) does not know")
        redirect = sorted(k for k in (model_args or {}) if k in _LOADING_ARGS)
        if redirect:
            raise ValueError(f"{name}: config.json's model_args set {', '.join(redirect)}, which would make timm "
                             "load weights other than the repository's safetensors file recorded in the store; "
                             "remove them, or pass the weights as --weights PATH")
        return arch, dict(model_args or {}), dict(cfg)
    arch, _ = split_model_name_tag(name)
    try:
        cfg = get_pretrained_cfg(name)
    except RuntimeError:  # timm: "Invalid pretrained tag"
        raise KeyError(f"timm knows {arch!r} but not {name!r}; its pretrained tags: "
                       f"{timm.list_pretrained(arch + '.*')}") from None
    if cfg is None:
        raise WeightsNotFoundError(f"timm registers no pretrained weights (and so no preprocessing) for {name!r}: "
                                   "use a name with a pretrained tag (timm.list_models(pretrained=True)) or "
                                   "hf-hub:ORG/NAME")
    return arch, {}, cfg.to_dict()


def preprocessing(cfg: dict, name: str) -> Preprocessing:
    """timm's eval preprocessing for ``cfg`` (``resolve_data_config``) as a :class:`Preprocessing`.

    timm's default ``center`` mode resizes the shorter side to ``floor(size / crop_pct)`` and center-crops
    ``size``; ``squash``/``border`` modes and non-square inputs are refused rather than approximated.
    """
    from timm.data import resolve_data_config

    data = resolve_data_config(pretrained_cfg=cfg)
    _, height, width = data["input_size"]
    mode = data.get("crop_mode") or "center"
    if height != width or mode != "center":
        raise ValueError(f"backbone {name!r}: timm preprocesses it with input {height}x{width} and crop mode "
                         f"{mode!r}; only square inputs with the center crop are supported")
    return Preprocessing(resize=math.floor(height / data["crop_pct"]), crop=height,
                         interpolation=data["interpolation"], mean=tuple(data["mean"]), std=tuple(data["std"]))


def config_for(name: str) -> tuple[BackboneConfig, dict]:
    """The :class:`BackboneConfig` a timm/hub name stands for (recorded in the store) and timm's pretrained cfg."""
    arch, model_args, cfg = resolve(name)
    hub_id = cfg.get("hf_hub_id")
    repo, revision = _split_revision(hub_id) if hub_id else (None, None)
    filename = safe_filename(cfg)
    recorded = {k: v for k, v in cfg.items() if k not in _NOT_RECORDED and v is not None}
    config = BackboneConfig(
        name=name, arch="timm", arch_kwargs={"model_name": arch, **model_args, "pretrained_cfg": recorded},
        timm_reference=name, weights_format="timm", weights_file=filename,
        weights_source=f"{HUB_PREFIX}{repo}" + (f"@{revision}" if revision else "") if repo else
        (cfg.get("url") or ""), preprocessing=preprocessing(cfg, name), heads=VIT_HEADS,
        description=f"timm {arch} with the pretrained weights of {name}")
    return config, cfg


def weights_for(config: BackboneConfig, weights=None) -> tuple[BackboneConfig, Path, dict | None]:
    """``(config, file, origin)``: ``weights`` if given (no origin; the config then records that local file, not
    the hub's), else the hub's safetensors file and its origin."""
    if weights is not None:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise WeightsNotFoundError(f"weights file {str(path)!r} for backbone {config.name!r} does not exist")
        return dataclasses.replace(config, weights_source="local file (--weights)", weights_file=path.name), path, \
            None
    if not config.weights_source.startswith(HUB_PREFIX):
        where = f" (only {config.weights_source})" if config.weights_source else ""
        raise WeightsNotFoundError(
            f"timm's config for {config.name!r} names no Hugging Face repository{where}; weights are read from the "
            "hub as safetensors or from a local file: download them and pass --weights PATH")
    repo, revision = _split_revision(config.weights_source[len(HUB_PREFIX):])
    path = download(repo, config.weights_file, revision)
    commit = path.parent.name if path.parent.parent.name == "snapshots" else None
    return config, path, {"repo": repo, "revision": commit, "requested_revision": revision or "main",
                          "file": config.weights_file}


def check_vit_shaped(net, name: str) -> None:
    """Refuse a model the ViT heads cannot pool (they need a token sequence, its blocks and its prefix count)."""
    lacks = [a for a in ("forward_features", "blocks", "num_prefix_tokens", "embed_dim") if not hasattr(net, a)]
    if lacks:
        raise ValueError(f"backbone {name!r} ({type(net).__name__}) is not ViT-shaped: the heads {list(VIT_HEADS)} "
                         f"pool a token sequence, and it lacks {', '.join(lacks)}")


def _model_kwargs(config: BackboneConfig) -> tuple[str, dict]:
    return config.arch_kwargs["model_name"], {k: v for k, v in config.arch_kwargs.items()
                                              if k not in ("model_name", "pretrained_cfg")}


def probe(config: BackboneConfig):
    """The architecture on the meta device (no memory, no weights), refused here if it is not ViT-shaped."""
    import timm
    import torch

    arch, kwargs = _model_kwargs(config)
    with torch.device("meta"):
        net = timm.create_model(arch, pretrained=False, num_classes=0, **kwargs)
    check_vit_shaped(net, config.name)
    return net


def build(config: BackboneConfig, cfg: dict, path: Path | None):
    """timm's model for ``config`` (classifier removed), with the weights of ``path`` loaded strictly by timm.

    The architecture is checked first (:func:`probe`), so a model the heads cannot pool is refused before a byte of
    its weights is read.
    """
    import timm

    from .checkpoints import _is_jax_layout, jax_to_timm, read_checkpoint

    arch, kwargs = _model_kwargs(config)
    shape = probe(config)
    if path is None:
        return timm.create_model(arch, pretrained=False, num_classes=0, **kwargs)
    state = read_checkpoint(path)
    if _is_jax_layout(state):  # a Google/big_vision .npz given as --weights
        state, _ = jax_to_timm(state, depth=len(shape.blocks))
    state = {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}
    # timm loads strictly only when the class count is the config's; state it as the file's own (0 without a
    # classifier), so a missing or extra key is an error, then drop the classifier: features come from the body.
    classifier = cfg.get("classifier") or "head"
    classifier = classifier[0] if isinstance(classifier, (list, tuple)) else classifier
    head = state.get(f"{classifier}.weight")
    num_classes = 0 if head is None else int(head.shape[0])
    load_cfg = {**cfg, "state_dict": state, "source": None, "file": None, "custom_load": False,
                "num_classes": num_classes, "label_offset": 0}
    try:
        net = timm.create_model(arch, pretrained=True, pretrained_cfg=load_cfg, num_classes=num_classes, **kwargs)
    except RuntimeError as e:
        raise CheckpointMismatchError(f"checkpoint {str(path)!r} does not fit timm's {arch}: "
                                      f"{' '.join(str(e).split())[:300]}") from None
    net.pretrained_cfg.pop("state_dict", None)  # no second reference to the weights
    net.reset_classifier(0)
    return net
