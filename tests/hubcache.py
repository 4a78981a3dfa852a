"""A Hugging Face hub cache built by a test, offline: what ``hf download`` leaves on disk, without the network.

Layout (``huggingface_hub``'s): ``<cache>/models--<org>--<name>/blobs/<sha256>`` holding the bytes,
``snapshots/<commit>/<file>`` a symlink to the blob, ``refs/main`` the commit.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest


def put(cache: Path, repo: str, files: dict[str, bytes], *, commit: str | None = None, kind: str = "model") -> str:
    """Lay ``files`` out as the cached snapshot ``commit`` of ``repo`` (and its ``main``); returns the commit."""
    commit = commit or hashlib.sha1(repo.encode() + b"".join(files[k] for k in sorted(files))).hexdigest()
    root = Path(cache) / f"{kind}s--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    for name, data in files.items():
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = root / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, link.parent))
    return commit


def safetensors_bytes(state: dict) -> bytes:
    from safetensors.torch import save

    return save({k: v.contiguous() for k, v in state.items()})


def config_bytes(architecture: str, model_args: dict, pretrained_cfg: dict, num_classes: int) -> bytes:
    """A timm ``config.json`` (what ``timm.models.push_to_hf_hub`` writes)."""
    return json.dumps({"architecture": architecture, "num_classes": num_classes, "num_features": None,
                       "model_args": model_args, "pretrained_cfg": pretrained_cfg}).encode()


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty HF cache under ``tmp_path`` with ``HF_HUB_OFFLINE=1``, for this process and its children.

    ``huggingface_hub`` and ``datasets`` read these variables once, at import, so their constants are set too.
    """
    from huggingface_hub import constants

    home = tmp_path / "hf_home"
    cache = home / "hub"
    cache.mkdir(parents=True)
    for var, value in (("HF_HOME", home), ("HF_HUB_CACHE", cache), ("HF_HUB_OFFLINE", "1"),
                       ("HF_DATASETS_OFFLINE", "1"), ("HF_DATASETS_CACHE", home / "datasets")):
        monkeypatch.setenv(var, str(value))
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    if "datasets" in sys.modules:
        config = sys.modules["datasets"].config
        for name, value in (("HF_HUB_OFFLINE", True), ("HF_DATASETS_OFFLINE", True),
                            ("HF_DATASETS_CACHE", home / "datasets"), ("HF_CACHE_HOME", str(home))):
            if hasattr(config, name):
                monkeypatch.setattr(config, name, value)
    return cache
