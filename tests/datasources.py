"""The same few embedded digits as an image folder, webdataset shards and a Hugging Face dataset (tests' data).

Each image is one PNG file's bytes, written unchanged into every layout, so features of a row must equal those
of the same file read from the image folder.
"""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import zarr
from PIL import Image

from featurize import open_split

N = {"train": 24, "test": 16}


def digit_rows(split: str) -> list[tuple[str, int, bytes]]:
    """``(name, label, png bytes)`` of the first ``N[split]`` rows of the embedded digits' ``split``."""
    source = open_split("digits", split)
    out = []
    for i in range(N[split]):
        buf = io.BytesIO()
        source.read(i).save(buf, "PNG")
        out.append((f"d{source.ids[i].split(':')[1]:0>4}", int(source.labels[i]), buf.getvalue()))
    return out


def write_folder(root: Path) -> Path:
    """``root/<split>/<label>/<name>.png``."""
    for split in N:
        for name, label, png in digit_rows(split):
            (root / split / str(label)).mkdir(parents=True, exist_ok=True)
            (root / split / str(label) / f"{name}.png").write_bytes(png)
    return root


def add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def write_shards(path: Path, rows, *, label_as: str = "cls") -> Path:
    """One uncompressed tar shard: ``<name>.png`` + ``<name>.cls`` (or ``.json``) per row, as img2dataset writes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for name, label, png in rows:
            add(tf, f"{name}.png", png)
            add(tf, f"{name}.{label_as}", str(label).encode() if label_as == "cls" else
                f'{{"label": {label}, "url": "http://example.invalid/{name}"}}'.encode())
    return path


def by_name(store: Path, split: str) -> dict[str, np.ndarray]:
    """Feature row per image name (the file stem / sample key at the end of the id)."""
    g = zarr.open_group(str(store), mode="r")[split]
    ids, feats = g["ids"][:], g["features"][:]
    return {str(i).replace(".png", "").rsplit("/", 1)[-1].rsplit(":", 1)[-1]: f for i, f in zip(ids, feats)}
