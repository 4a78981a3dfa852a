"""What a reader needs to trust and interpret the numbers: library versions and creation time."""
from __future__ import annotations

import datetime
import platform
from importlib import metadata

TRACKED = ("privlin", "numpy", "zarr", "torch", "torchvision", "timm", "jax")


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries that shape the features (read from metadata, nothing imported)."""
    out = {"python": platform.python_version()}
    for name in TRACKED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def stamp() -> dict:
    """Provenance common to every write: versions and a UTC creation time."""
    return {"versions": library_versions(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
