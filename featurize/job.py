"""The extraction job: images -> frozen backbone -> whole store shards, resumable and shardable across workers.

Why it is shaped this way:

* Batches never straddle a store shard and always start at a shard boundary, so every shard is computed from
  the same batches whether the job ran in one go, was killed and resumed, or was split across ranks: on a
  deterministic CPU the stores are bitwise identical.
* Decoding, resizing and cropping run in DataLoader workers and hand over ``uint8`` tensors; normalization and
  the network run on the device (inference mode, channels-last, bf16 autocast on CUDA).
* A shard is written whole and marked done by the store only after its data is on disk (a background thread
  overlaps the write with the next shard's compute); a killed job loses at most the shards in flight.
* An image that cannot be decoded stops the job with its file name, unless ``skip_bad``: then its row is
  written with ``valid=False`` and the store lists its id.
"""
from __future__ import annotations

import contextlib
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

import stores
from backbones import Backbone, load_backbone

from .datasets import ImageSplit, dataset_splits, open_split

FEATURE_DTYPES = ("float16", "float32")


class CorruptImageError(RuntimeError):
    """An image could not be decoded (and ``skip_bad`` was off)."""


@dataclass(frozen=True)
class ShardAssignment:
    """Which writer this process is: ``rank`` of ``world`` (``--shard rank/world`` or torchrun's env)."""

    rank: int = 0
    world: int = 1

    @classmethod
    def parse(cls, text: str | None) -> "ShardAssignment":
        """``"i/n"``; ``None`` reads ``RANK``/``WORLD_SIZE`` (set by torchrun) or means ``0/1``."""
        if text is None:
            return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
        if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
            raise ValueError(f"--shard must look like i/n with 0 <= i < n, got {text!r}")
        return cls(int(m.group(1)), int(m.group(2)))

    @property
    def writer_id(self) -> str:
        return f"{self.rank}/{self.world}"


def worker_context():
    """How decoding workers start: forked (cheapest) unless this process has initialized CUDA, then from a fork
    server.  A worker forked from a CUDA process aborts the job the first time it frees an inherited CUDA tensor
    ("CUDA error: initialization error", seen on an H100); the fork server is a fresh process that never touched
    CUDA, and forks the workers from there."""
    if not torch.cuda.is_initialized():
        return None
    ctx = torch.multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])  # workers start with this module (torch, PIL) already imported
    return ctx


class _DecodedRows(Dataset):
    """Row ``i`` -> ``(i, uint8 image tensor, error text)``; runs in DataLoader workers."""

    def __init__(self, source: ImageSplit, transform, crop: int):
        self.source, self.transform, self.crop = source, transform, crop

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int):
        try:
            return i, self.transform(self.source.read(i)), ""
        except Exception as e:  # noqa: BLE001 - any decoder failure is reported with the file name
            return i, torch.zeros(3, self.crop, self.crop, dtype=torch.uint8), f"{type(e).__name__}: {e}"


def shard_batches(bounds: list[tuple[int, int]], batch_size: int) -> list[list[int]]:
    """Row batches of at most ``batch_size`` that start at each shard's first row and never cross shards."""
    return [list(range(b, min(b + batch_size, stop))) for start, stop in bounds
            for b in range(start, stop, batch_size)]


def resolve_device(device: str | None) -> torch.device:
    """``"auto"``/None: the local CUDA device (``LOCAL_RANK`` under torchrun) if any, else the CPU.

    Raises
    ------
    ValueError
        A device name torch does not know, or a CUDA device that is not there.
    """
    if device in (None, "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"--device {device!r} is not a device name (use auto, cpu, cuda or cuda:N): {e}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA GPU is visible to torch here; use --device cpu (or auto)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here")
    elif dev.type != "cpu":
        raise ValueError(f"--device {device!r}: only auto, cpu, cuda and cuda:N are supported")
    return dev


def default_out(backbone: str, head: str, dataset: str) -> str:
    """``features/<backbone>_<head>_<dataset>.zarr``; ``imagefolder:PATH`` contributes PATH's folder name."""
    name = dataset
    if dataset.startswith("imagefolder:"):
        name = "imagefolder-" + (os.path.basename(os.path.normpath(dataset.split(":", 1)[1])) or "root")
    return os.path.join("features", f"{backbone}_{head}_{re.sub(r'[^A-Za-z0-9._-]+', '-', name)}.zarr")


def _forward(model: torch.nn.Module, images: torch.Tensor, device: torch.device) -> np.ndarray:
    images = images.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    with torch.inference_mode(), autocast:
        return model(images).float().cpu().numpy()


def extract_split(bb: Backbone, source: ImageSplit, out, *, assignment: ShardAssignment = ShardAssignment(),
                  device: torch.device = torch.device("cpu"), dtype: str = "float16", batch_size: int = 256,
                  num_workers: int = 0, shard_rows: int | None = None, skip_bad: bool = False,
                  root_attrs: dict | None = None, progress: bool = True) -> dict:
    """Fill this writer's pending shards of one split; returns a summary.

    Parameters
    ----------
    bb : Backbone
        Model already on ``device`` (see :func:`extract`).
    source : ImageSplit
    out : path or URL of the store
    assignment : ShardAssignment
        This process writes shards ``i`` with ``i % world == rank``.
    dtype : {"float16", "float32"}
        Stored feature dtype.

    Returns
    -------
    dict with ``split``, ``rows`` (computed now), ``shards`` (written now), ``skipped`` (ids), ``seconds``,
    ``complete`` (every shard of the split done, by any writer).
    """
    attrs = {"dataset": source.dataset, "split": source.split, "source": source.attrs, "n_examples": len(source),
             "skip_bad": bool(skip_bad), "device_type": device.type,
             "autocast": "bfloat16" if device.type == "cuda" else None}
    writer = stores.create_split(out, source.split, n_rows=len(source), dim=bb.dim, dtype=dtype,
                                 shard_rows=shard_rows, attrs=attrs, root_attrs=root_attrs,
                                 writer_id=assignment.writer_id)
    pending = set(writer.pending())
    mine = [s for s in writer.shards_for(assignment.rank, assignment.world) if s in pending]
    bounds = [writer.shard_bounds(s) for s in mine]
    n_rows = sum(stop - start for start, stop in bounds)
    summary = {"split": source.split, "rows": n_rows, "shards": len(mine), "skipped": [], "seconds": 0.0}
    t0 = time.perf_counter()
    if mine:
        crop = bb.config.preprocessing.crop
        loader = DataLoader(_DecodedRows(source, bb.transform, crop), batch_sampler=shard_batches(bounds, batch_size),
                            num_workers=num_workers, pin_memory=device.type == "cuda",
                            prefetch_factor=4 if num_workers else None,
                            multiprocessing_context=worker_context() if num_workers else None)
        bar = tqdm(total=n_rows, unit="img", desc=f"{bb.config.name}/{bb.head} {source.dataset}:{source.split}",
                   disable=not progress, dynamic_ncols=True, smoothing=0.1)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-writer") as pool:
            in_flight = []
            shard_iter = iter(zip(mine, bounds))
            shard, (start, stop) = next(shard_iter)
            feats = np.empty((stop - start, bb.dim), dtype=np.float32)
            valid = np.ones(stop - start, dtype=bool)
            for rows, images, errors in loader:
                rows = rows.numpy()
                feats[rows[0] - start:rows[-1] + 1 - start] = _forward(bb.model, images, device)
                for row, err in zip(rows, errors):
                    if err:
                        if not skip_bad:
                            raise CorruptImageError(f"cannot decode {source.describe(int(row))}: {err}. "
                                                    "Fix or remove it, or pass --skip-bad to record it as skipped")
                        valid[row - start] = False
                        feats[row - start] = 0.0
                        summary["skipped"].append(source.ids[int(row)])
                bar.update(len(rows))
                if rows[-1] + 1 == stop:  # shard complete: hand it to the writer thread
                    in_flight.append(pool.submit(writer.write_shard, shard, feats, source.labels[start:stop],
                                                 np.asarray(source.ids[start:stop]), valid))
                    while len(in_flight) > 1:
                        in_flight.pop(0).result()
                    nxt = next(shard_iter, None)
                    if nxt is not None:
                        shard, (start, stop) = nxt
                        feats = np.empty((stop - start, bb.dim), dtype=np.float32)
                        valid = np.ones(stop - start, dtype=bool)
            for f in in_flight:
                f.result()
        bar.close()
    summary["seconds"] = time.perf_counter() - t0
    summary["complete"] = writer.finalize()
    return summary


def extract(backbone, dataset: str, *, splits: list[str] | None = None, out=None, head: str | None = None,
            data_dir=None, weights=None, batch_size: int = 256, num_workers: int | None = None,
            device: str | None = "auto", dtype: str = "float16", shard: str | None = None,
            shard_rows: int | None = None, skip_bad: bool = False, progress: bool = True) -> dict:
    """Featurize ``dataset`` with ``backbone`` into the feature store ``out``; what ``featurize`` runs.

    Parameters
    ----------
    backbone : str or backbones.BackboneConfig
        Registry name (``backbones.list_backbones()``) or a config.
    dataset : str
        ``imagenet``, ``cifar10``, ``cifar100``, ``digits`` or ``imagefolder:PATH``.
    splits : list of str, optional
        Default: every split the dataset has.
    out : path or fsspec URL, optional
        Default ``features/<backbone>_<head>_<dataset>.zarr``.
    head : str, optional
        Default: the backbone's first head.
    weights : path, optional
        Default ``$PRIVLIN_WEIGHTS_DIR/<file>``.
    batch_size : int
    num_workers : int, optional
        Decoding processes; default ``min(8, cpu_count)``.
    device : str
        ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
    dtype : {"float16", "float32"}
        Stored feature dtype.
    shard : str, optional
        ``"i/n"``: this process writes store shards ``s`` with ``s % n == i``. Default from torchrun's
        ``RANK``/``WORLD_SIZE``, else ``0/1``.
    shard_rows : int, optional
        Rows per store shard (unit of resume); default chosen by the store (~16 MiB).
    skip_bad : bool
        Record undecodable images as skipped rows instead of stopping.

    Returns
    -------
    dict
        ``{"out": out, "splits": [summary per split]}``.
    """
    if dtype not in FEATURE_DTYPES:
        raise ValueError(f"--dtype must be one of {FEATURE_DTYPES}, got {dtype!r}")
    if batch_size <= 0:
        raise ValueError(f"--batch-size must be positive, got {batch_size}")
    assignment = ShardAssignment.parse(shard)
    dev = resolve_device(device)
    splits = list(splits) if splits else dataset_splits(dataset, data_dir)
    sources = [open_split(dataset, s, data_dir) for s in splits]  # fail on bad data before loading a model
    bb = load_backbone(backbone, head=head, weights=weights)
    out = out or default_out(bb.config.name, bb.head, dataset)
    root_attrs = {**bb.provenance(), "dataset": sources[0].dataset, "classes": sources[0].classes}
    for src in sources:  # every split's layout and the store's provenance checked before anything is written
        stores.check_split(out, src.split, n_rows=len(src), dim=bb.dim, dtype=dtype, shard_rows=shard_rows,
                           root_attrs=root_attrs)
    bb.model.to(dev, memory_format=torch.channels_last)
    workers = min(8, os.cpu_count() or 1) if num_workers is None else num_workers
    summaries = [extract_split(bb, src, out, assignment=assignment, device=dev, dtype=dtype, batch_size=batch_size,
                               num_workers=workers, shard_rows=shard_rows, skip_bad=skip_bad,
                               root_attrs=root_attrs, progress=progress) for src in sources]
    return {"out": str(out), "splits": summaries}
