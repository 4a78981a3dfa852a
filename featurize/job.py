"""The extraction job: images -> frozen backbone -> whole store shards, resumable and shardable across workers.

Why it is shaped this way:

* Batches never straddle a store shard and always start at a shard boundary, so every shard is computed from
  the same batches whether the job ran in one go, was killed and resumed, or was split across ranks: on a
  deterministic CPU the stores are bitwise identical.
* Decoding, resizing and cropping run in DataLoader workers and hand over ``uint8`` tensors (JPEGs at a reduced
  DCT scale, see :mod:`featurize.decode`); normalization and the network run on the device (inference mode,
  channels-last, bf16 autocast on CUDA). With ``decode_mode="device"`` the workers only read JPEG bytes and the
  device decodes and resizes them in batches, on a side stream while the previous batch's forward runs.
* One DataLoader serves every split of a job: workers start once, not once per split.
* A shard is written whole and marked done by the store only after its data is on disk (a background thread
  overlaps the write with the next shard's compute); a killed job loses at most the shards in flight.
* An image that cannot be decoded stops the job with its file name, unless ``skip_bad``: then its row is
  written with ``valid=False`` and the store lists its id.
"""
from __future__ import annotations

import contextlib
import os
import queue
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

import cliconv as cli
import stores
from stores.items import ITEM_CHARS, of_name
from backbones import Backbone, load_backbone

from . import decode
from .datasets import ImageSplit, dataset_splits, open_split, row_item
from .names import CorruptImageError  # noqa: F401 - public here too (featurize.CorruptImageError)

FEATURE_DTYPES = ("float16", "float32")


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


@dataclass(frozen=True)
class Feed:
    """How batches are decoded and handed to the model: speed only, the features are the same whatever is chosen
    (bit-equal on the CPU, tests/test_decode.py). benchmarks/bench_gpu_decode.py times each option on a GPU; the
    defaults follow that measurement (BENCHMARKS.md, "featurize --decode device: where the time goes").

    Attributes
    ----------
    ahead : int or None
        Batches a staging thread prepares on the device (copies, and with ``decode="device"`` decodes) before the
        forward that needs them; 0 prepares each batch in the job's loop, between queuing forwards. None: 1 on
        CUDA (nvJPEG blocks its calling thread, so a thread of its own keeps the forwards queued), 0 elsewhere.
    decode_threads : int
        ``decode="device"``: a batch's JPEGs decoded and resized in this many chunks, each by its own thread and
        CUDA stream (:func:`featurize.decode.decode_batch`), so that one chunk's resize overlaps the next one's
        decoding.
    pin_bytes : bool
        On CUDA, the loader's pin-memory thread page-locks the batch's JPEG bytes too (the device decoder copies
        them to the GPU), not only its decoded images.
    prefetch : int
        Batches each DataLoader worker prepares ahead (its ``prefetch_factor``).
    """

    ahead: int | None = None
    decode_threads: int = 1
    pin_bytes: bool = False
    prefetch: int = 4

    def __post_init__(self):
        for name, low in (("ahead", 0), ("decode_threads", 1), ("prefetch", 1)):
            value = getattr(self, name)
            if name == "ahead" and value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"Feed.{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.pin_bytes, bool):
            raise ValueError(f"Feed.pin_bytes must be True or False, got {self.pin_bytes!r}")

    @classmethod
    def parse(cls, text: str | None) -> "Feed":
        """``--feed``: comma-separated ``NAME=VALUE`` items (any subset of the fields, integers; ``pin_bytes`` 0
        or 1), e.g. ``ahead=1,pin_bytes=1``; empty or None: the defaults.

        Raises
        ------
        ValueError
            An unknown name, an item without ``=``, a value that is not an integer, or one out of range.
        """
        names = [f.name for f in fields(cls)]
        kw = {}
        for item in filter(None, (text or "").replace(" ", "").split(",")):
            name, eq, value = item.partition("=")
            if name not in names or not eq:
                raise ValueError(f"--feed takes NAME=VALUE items with NAME among {', '.join(names)}; got {item!r}")
            try:
                kw[name] = int(value)
            except ValueError:
                raise ValueError(f"--feed {name}: {value!r} is not an integer") from None
            if name == "pin_bytes":
                if kw[name] not in (0, 1):
                    raise ValueError(f"--feed pin_bytes is 0 or 1, got {value!r}")
                kw[name] = bool(kw[name])
        return cls(**kw)


def worker_context():
    """How decoding workers start: forked (cheapest) unless this process has initialized CUDA, then from a fork
    server.  A worker forked from a CUDA process aborts the job the first time it frees an inherited CUDA tensor
    ("CUDA error: initialization error"); the fork server is a fresh process that never touched
    CUDA, and forks the workers from there."""
    if not torch.cuda.is_initialized():
        return None
    ctx = torch.multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])  # workers start with this module (torch, PIL) already imported
    return ctx


class _Rows(Dataset):
    """``(split index, row)`` -> ``(split index, row, kind, payload, item)``; runs in DataLoader workers.

    ``kind`` is ``"image"`` (payload: the ``uint8 (3, crop, crop)`` tensor), ``"jpeg"`` (payload: the file's bytes
    as a ``uint8`` tensor and its ``(width, height)``, left to the device; ``decode="device"`` only) or
    ``"error"`` (payload: the decoder's message).  Sources without file bytes (arrays) decode through ``read``.
    ``item`` is the row's item (:func:`featurize.datasets.row_item`), from the bytes read here for decoding (one
    read per file); None only where the file could not be read (the row is then an error).
    With ``worker_every = n``, device mode leaves row ``i`` of a split to the workers (PIL, draft) where
    ``i % n == n - 1`` (:func:`decode.on_device`).
    """

    def __init__(self, sources: list[ImageSplit], transform, pre, mode: str, worker_every: int = 0):
        self.sources, self.transform, self.pre, self.mode = sources, transform, pre, mode
        self.worker_every = worker_every

    def __len__(self) -> int:
        return sum(len(s) for s in self.sources)

    def __getitem__(self, key):
        k, i = key
        source, item = self.sources[k], None
        try:
            raw = getattr(source.images, "raw", None)
            if raw is None:
                return k, i, "image", self.transform(source.read(i)), row_item(source, i)
            data = raw(i)
            item = row_item(source, i, data)
            if self.mode == "device" and decode.on_device(i, self.worker_every):
                size = decode.device_jpeg_size(data)
                if size is not None:
                    return k, i, "jpeg", (torch.frombuffer(bytearray(data), dtype=torch.uint8), size), item
            image = decode.open_rgb(data, self.pre, draft=self.mode != "full")
            return k, i, "image", self.transform(image), item
        except Exception as e:  # noqa: BLE001 - any decoder failure is reported with the file name
            return k, i, "error", f"{type(e).__name__}: {e}", item


class _Batch:
    """One batch as the workers hand it over: decoded images stacked, JPEG bytes for the device in one buffer.

    ``keys[p] = (split index, row)`` and ``items[p]`` its item for batch position ``p``; ``images[j]`` is position
    ``cpu_pos[j]``; the JPEG of position ``jpeg_pos[j]`` is ``buffer[offsets[j]:offsets[j + 1]]`` of size
    ``sizes[j]``; ``errors`` maps positions to messages.
    """

    def __init__(self, rows, crop: int, pin_bytes: bool = False):
        self.pin_bytes = pin_bytes
        self.keys = [(k, i) for k, i, _, _, _ in rows]
        self.items = [item for *_, item in rows]
        self.cpu_pos, images, self.jpeg_pos, jpegs, self.sizes, self.errors = [], [], [], [], [], {}
        for p, (_, _, kind, payload, _) in enumerate(rows):
            if kind == "image":
                self.cpu_pos.append(p)
                images.append(payload)
            elif kind == "jpeg":
                self.jpeg_pos.append(p)
                jpegs.append(payload[0])
                self.sizes.append(payload[1])
            else:
                self.errors[p] = payload
        self.images = torch.stack(images) if images else torch.empty((0, 3, crop, crop), dtype=torch.uint8)
        self.offsets = np.cumsum([0] + [len(j) for j in jpegs]).tolist()
        self.buffer = torch.cat(jpegs) if jpegs else torch.empty(0, dtype=torch.uint8)

    def jpegs(self) -> list[torch.Tensor]:
        return [self.buffer[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:])]

    def pin_memory(self) -> "_Batch":
        """Called by the DataLoader's pin-memory thread (on CUDA): page-locked images, and bytes if asked."""
        self.images = self.images.pin_memory()
        if self.pin_bytes and len(self.buffer):
            self.buffer = self.buffer.pin_memory()
        return self


class _Collate:
    def __init__(self, crop: int, pin_bytes: bool = False):
        self.crop, self.pin_bytes = crop, pin_bytes

    def __call__(self, items) -> _Batch:
        return _Batch(items, self.crop, self.pin_bytes)


def _stage(batch: _Batch, device: torch.device, pre, transform, stream,
           decode_streams: list | None = None) -> tuple[torch.Tensor, dict, object]:
    """The batch as one ``uint8 (B, 3, crop, crop)`` tensor on ``device``: the workers' images copied, the JPEGs
    decoded there (:func:`decode.decode_batch`, in chunks on ``decode_streams`` if given), those the device
    refused decoded by PIL here.  On CUDA the work is queued on ``stream`` (beside the previous batch's forward);
    returns ``(images, errors, event)``, ``event`` marking the end of that work (None off CUDA)."""
    errors = dict(batch.errors)
    n = len(batch.keys)
    if device.type == "cpu" and len(batch.cpu_pos) == n:
        return batch.images, errors, None
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        if len(batch.cpu_pos) == n:
            x = batch.images.to(device, non_blocking=True)
        else:
            x = torch.zeros((n, 3, pre.crop, pre.crop), dtype=torch.uint8, device=device)
            if batch.cpu_pos:
                x[batch.cpu_pos] = batch.images.to(device, non_blocking=True)
            if batch.jpeg_pos:
                jpegs = batch.jpegs()
                done, crops = [], []
                decoded = decode.decode_batch(jpegs, batch.sizes, pre, device, streams=decode_streams)
                for p, data, crop in zip(batch.jpeg_pos, jpegs, decoded):
                    if crop is None:  # the device decoder refused it: PIL decodes it or names the fault
                        try:
                            crop = transform(decode.open_rgb(data.numpy().tobytes(), pre)).to(device)
                        except Exception as e:  # noqa: BLE001
                            errors[p] = f"{type(e).__name__}: {e}"
                            continue
                    done.append(p)
                    crops.append(crop)
                if done:
                    x[done] = torch.stack(crops)
        event = stream.record_event() if stream is not None else None
    return x, errors, event


class _Failed:
    """An exception raised in the staging thread, handed to the job's loop to raise there."""

    def __init__(self, error: BaseException):
        self.error = error


@contextlib.contextmanager
def _staged(loader, stage, ahead: int):
    """``(batch, stage(batch))`` for every batch of ``loader``, in order: staged in the caller's thread
    (``ahead=0``) or by a thread that keeps up to ``ahead`` staged batches ready (plus the one it is staging).

    A failure in the thread (a worker's, the device decoder's) is raised in the caller's loop; leaving the context
    early (the caller failed) stops the thread before returning, so no batch is staged after the job ended.
    """
    if ahead == 0:
        yield ((batch, stage(batch)) for batch in loader)
        return
    ready: queue.Queue = queue.Queue(maxsize=ahead)
    stop, end = threading.Event(), object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run():
        try:
            for batch in loader:
                if not put((batch, stage(batch))):
                    return
            put(end)
        except BaseException as e:  # noqa: BLE001 - re-raised in the job's loop
            put(_Failed(e))

    def items():
        while True:
            item = ready.get()
            if item is end:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item

    thread = threading.Thread(target=run, name="featurize-stage", daemon=True)
    thread.start()
    try:
        yield items()
    finally:
        stop.set()
        thread.join()


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


def default_out(backbone: str, head: str, dataset: str, data_dir=None) -> str:
    """``features/<backbone>_<head>_<name>.zarr``, ``name`` the dataset's: ``imagefolder:PATH`` and ``webdataset``
    (its ``data_dir``) add their folder's name, ``hf:PATH_OR_NAME`` a local folder's name or the hub name (and
    its ``#`` options), so that stores of two folders do not default to one path."""
    def folder(path) -> str:
        return os.path.basename(os.path.normpath(os.path.expanduser(str(path)))) or "root"

    name = dataset
    if dataset.startswith("imagefolder:"):
        name = "imagefolder-" + folder(dataset.split(":", 1)[1])
    elif dataset == "webdataset" and data_dir is not None:
        name = "webdataset-" + folder(data_dir)
    elif dataset.startswith("hf:"):
        spec, _, options = dataset[len("hf:"):].partition("#")
        local = os.path.isdir(os.path.expanduser(spec))
        name = "hf-" + (folder(spec) if local else spec) + (f"-{options}" if options else "")
    return os.path.join("features", f"{backbone}_{head}_{re.sub(r'[^A-Za-z0-9._-]+', '-', name)}.zarr")


def _forward(model: torch.nn.Module, images: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The batch's features, left on ``device``: on CUDA the forward is only queued when this returns."""
    images = images.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    with torch.inference_mode(), autocast:
        return model(images)


class _SplitJob:
    """One split's share of the job: its store writer, this writer's pending shards, and the shard being filled."""

    def __init__(self, bb: Backbone, source: ImageSplit, out, *, assignment: ShardAssignment, device: torch.device,
                 dtype: str, shard_rows: int | None, skip_bad: bool, root_attrs: dict | None, progress: bool):
        self.bb, self.source, self.skip_bad, self.progress = bb, source, skip_bad, progress
        attrs = {"dataset": source.dataset, "split": source.split, "source": source.attrs, "n_examples": len(source),
                 "skip_bad": bool(skip_bad), "device_type": device.type,
                 "autocast": "bfloat16" if device.type == "cuda" else None}
        self.writer = stores.create_split(out, source.split, n_rows=len(source), dim=bb.dim, dtype=dtype,
                                          shard_rows=shard_rows, attrs=attrs, root_attrs=root_attrs,
                                          writer_id=assignment.writer_id)
        pending = set(self.writer.pending())
        self.mine = [s for s in self.writer.shards_for(assignment.rank, assignment.world) if s in pending]
        self.bounds = [self.writer.shard_bounds(s) for s in self.mine]
        self.summary = {"split": source.split, "rows": sum(b - a for a, b in self.bounds), "shards": len(self.mine),
                        "skipped": [], "seconds": 0.0, "repeated_items": 0}
        self.t0, self.bar, self.in_flight, self.finished = None, None, [], False
        self.keys: list[np.ndarray] = []  # 64 bits of each valid row's item, to count repeats at the end
        self.shards = iter(zip(self.mine, self.bounds))

    def start(self, t0: float) -> None:
        """Begin filling shards; ``t0`` is when this split's work began (the job's start for the first split)."""
        self.t0 = t0
        self.bar = tqdm(total=self.summary["rows"], unit="img", dynamic_ncols=True, smoothing=0.1,
                        desc=f"{self.bb.config.name}/{self.bb.head} {self.source.dataset}:{self.source.split}",
                        disable=not self.progress)
        self._next_shard()

    def _next_shard(self) -> None:
        nxt = next(self.shards, None)
        if nxt is not None:
            self.shard, (self.start_row, self.stop_row) = nxt
            self.feats = np.empty((self.stop_row - self.start_row, self.bb.dim), dtype=np.float32)
            self.valid = np.ones(self.stop_row - self.start_row, dtype=bool)
            self.items = np.empty(self.stop_row - self.start_row, dtype=f"U{ITEM_CHARS}")

    def add(self, rows: np.ndarray, items: list, feats: np.ndarray, errors: dict, pool: ThreadPoolExecutor) -> None:
        """Rows ``rows`` (consecutive, inside the current shard), their items and features; ``errors[p]`` for
        position ``p`` of ``rows`` stops the job, or with ``skip_bad`` records the row as skipped (its item that of
        the bytes read, or, for a file that could not be read, of the public name ``unread:<dataset>:<id>``: the
        row holds no example, so no mechanism reads it)."""
        start, source = self.start_row, self.source
        self.feats[rows[0] - start:rows[-1] + 1 - start] = feats
        self.items[rows[0] - start:rows[-1] + 1 - start] = [item or "" for item in items]
        for p, err in sorted(errors.items()):
            row = int(rows[p])
            if not self.skip_bad:
                raise CorruptImageError(f"cannot decode {source.describe(row)}: {err}. "
                                        "Fix or remove it, or pass --skip-bad to record it as skipped")
            self.valid[row - start] = False
            self.feats[row - start] = 0.0
            if items[p] is None:
                self.items[row - start] = of_name(f"unread:{source.dataset}:{source.ids[row]}")
            self.summary["skipped"].append(source.ids[row])
        self.bar.update(len(rows))
        if rows[-1] + 1 == self.stop_row:  # shard complete: hand it to the writer thread
            self.keys.append(np.array([int(t[:16], 16) for t in self.items[self.valid]], dtype=np.uint64))
            self.in_flight.append(pool.submit(self.writer.write_shard, self.shard, self.feats,
                                              source.labels[start:self.stop_row],
                                              np.asarray(source.ids[start:self.stop_row]), self.valid,
                                              items=self.items))
            while len(self.in_flight) > 1:
                self.in_flight.pop(0).result()
            self._next_shard()

    def finish(self) -> dict:
        """Wait for the shards in flight and mark the split done; ``repeated_items`` counts the rows (of this
        writer's shards) whose item another row has too: byte-identical files, one image in several rows."""
        for f in self.in_flight:
            f.result()
        keys = np.concatenate(self.keys) if self.keys else np.zeros(0, np.uint64)
        self.summary["repeated_items"] = int(keys.size - np.unique(keys).size)
        if self.bar is not None:
            self.bar.close()
            self.summary["seconds"] = time.perf_counter() - self.t0
        self.summary["complete"] = self.writer.finalize()
        self.finished = True
        return self.summary


def extract_splits(bb: Backbone, sources: list[ImageSplit], out, *, assignment: ShardAssignment = ShardAssignment(),
                   device: torch.device = torch.device("cpu"), dtype: str = "float16", batch_size: int = 256,
                   num_workers: int = 0, shard_rows: int | None = None, skip_bad: bool = False,
                   decode_mode: str = "auto", root_attrs: dict | None = None, progress: bool = True,
                   feed: Feed = Feed(), worker_every: int = 0) -> list[dict]:
    """Fill this writer's pending shards of every split in ``sources``, in order; one summary per split.

    One DataLoader serves every split, so decoding workers start once per job and decode the next split's first
    batches while the last one's finish. Parameters are those of :func:`extract_split`.
    """
    mode = decode.resolve_mode(decode_mode, device)
    decode.check_worker_every(worker_every, mode)
    jobs = [_SplitJob(bb, src, out, assignment=assignment, device=device, dtype=dtype, shard_rows=shard_rows,
                      skip_bad=skip_bad, root_attrs=root_attrs, progress=progress) for src in sources]
    keys = [[(k, i) for i in rows] for k, job in enumerate(jobs) for rows in shard_batches(job.bounds, batch_size)]
    pre = bb.config.preprocessing
    if keys:
        cuda = device.type == "cuda"
        loader = DataLoader(_Rows(sources, bb.transform, pre, mode, worker_every), batch_sampler=keys,
                            collate_fn=_Collate(pre.crop, feed.pin_bytes), num_workers=num_workers, pin_memory=cuda,
                            prefetch_factor=feed.prefetch if num_workers else None,
                            multiprocessing_context=worker_context() if num_workers else None)
        began = [time.perf_counter()]  # when the split now starting began: the job's start, then each split's end
        stream = torch.cuda.Stream(device) if cuda else None
        chunks = None
        if feed.decode_threads > 1:  # one CUDA stream per decoding thread (None off CUDA: threads only)
            chunks = [torch.cuda.Stream(device) if cuda else None for _ in range(feed.decode_threads)]

        def stage(batch):
            return _stage(batch, device, pre, bb.transform, stream, chunks)

        jobs[keys[0][0][0]].start(began[0])  # the first bar shows now, while the workers start and decode
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-writer") as pool:
            def launch(batch, staged):
                """Queue the batch's forward and the copy of its features to the host; on CUDA nothing waits."""
                images, errors, event = staged
                if event is not None:  # the forward waits for this batch's copy/decode on the side stream
                    torch.cuda.current_stream(device).wait_event(event)
                    images.record_stream(torch.cuda.current_stream(device))
                feats = _forward(bb.model, images, device).float()
                if not cuda:
                    return batch.keys, batch.items, feats, errors, None
                host = feats.to("cpu", non_blocking=True)  # page-locked, copied once the forward is done
                return batch.keys, batch.items, host, errors, torch.cuda.current_stream(device).record_event()

            def finish(keys, items, feats, errors, done):
                if done is not None:
                    done.synchronize()  # this batch's features are on the host; later forwards may still run
                k = keys[0][0]  # a batch never straddles a shard, so never a split
                for job in jobs[:k]:
                    if not job.finished:
                        job.finish()
                        began[0] = time.perf_counter()
                if jobs[k].t0 is None:
                    jobs[k].start(began[0])
                jobs[k].add(np.asarray([i for _, i in keys]), items, feats.numpy(), errors, pool)

            queued = None
            ahead = feed.ahead if feed.ahead is not None else int(device.type == "cuda")
            with _staged(loader, stage, ahead) as batches:
                for batch, staged in batches:
                    # on CUDA: batch n's forward is queued behind n-1's, then n-1's features are taken (the only
                    # wait), then n+1 is staged (copied/decoded on the side stream, in the staging thread if
                    # ``feed.ahead``) while the GPU runs n
                    current = launch(batch, staged)
                    if queued is not None:
                        finish(*queued)
                    queued = current
                    if not cuda:  # off CUDA the forward ran in launch: nothing to overlap, no batch held back
                        finish(*queued)
                        queued = None
                if queued is not None:
                    finish(*queued)
    return [job.summary if job.finished else job.finish() for job in jobs]


def extract_split(bb: Backbone, source: ImageSplit, out, *, assignment: ShardAssignment = ShardAssignment(),
                  device: torch.device = torch.device("cpu"), dtype: str = "float16", batch_size: int = 256,
                  num_workers: int = 0, shard_rows: int | None = None, skip_bad: bool = False,
                  decode_mode: str = "auto", root_attrs: dict | None = None, progress: bool = True,
                  feed: Feed = Feed(), worker_every: int = 0) -> dict:
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
    decode_mode : {"auto", "draft", "full", "device"}
        How images are decoded (:data:`featurize.decode.DECODE_MODES`).
    feed : Feed
        How batches are prepared and handed to the model (speed only).
    worker_every : int
        ``decode_mode="device"``: every ``n``-th row of a split (``row % n == n - 1``) is decoded by PIL in the
        workers, beside the device decoder, instead of by it; 0: none (:func:`featurize.decode.on_device`).

    Returns
    -------
    dict with ``split``, ``rows`` (computed now), ``shards`` (written now), ``skipped`` (ids), ``seconds``,
    ``repeated_items`` (rows written now whose item another of them has: byte-identical copies of one image),
    ``complete`` (every shard of the split done, by any writer).
    """
    return extract_splits(bb, [source], out, assignment=assignment, device=device, dtype=dtype,
                          batch_size=batch_size, num_workers=num_workers, shard_rows=shard_rows, skip_bad=skip_bad,
                          decode_mode=decode_mode, root_attrs=root_attrs, progress=progress, feed=feed,
                          worker_every=worker_every)[0]


def extract(backbone, dataset: str, *, splits: list[str] | None = None, out=None, head: str | None = None,
            data_dir=None, weights=None, batch_size: int = 256, num_workers: int | None = None,
            device: str | None = "auto", dtype: str = "float16", shard: str | None = None,
            shard_rows: int | None = None, skip_bad: bool = False, decode_mode: str = "auto",
            progress: bool = True, feed: Feed = Feed(), worker_every: int = 0) -> dict:
    """Featurize ``dataset`` with ``backbone`` into the feature store ``out``; what ``featurize`` runs.

    Parameters
    ----------
    backbone : str or backbones.BackboneConfig
        Registry name (``backbones.list_backbones()``) or a config.
    dataset : str
        ``imagenet``, ``cifar10``, ``cifar100``, ``digits``, ``imagefolder:PATH``, ``webdataset`` (shards under
        ``data_dir``) or ``hf:PATH_OR_NAME`` (:func:`featurize.open_split`).
    splits : list of str, optional
        Default: every split the dataset has.
    out : path or fsspec URL, optional
        Default :func:`default_out`: ``features/<backbone>_<head>_<dataset>.zarr``.
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
    decode_mode : {"auto", "draft", "full", "device"}
        ``draft``: JPEGs decoded by PIL at the smallest DCT scale covering the resize target; ``full``: whole
        images; ``device``: baseline JPEGs decoded and resized in batches on ``device`` (nvJPEG on CUDA), others by
        PIL; ``auto``: ``device`` on CUDA, else ``draft``. Recorded in the store (``decode``).
    feed : Feed
        How batches are prepared and handed to the model (staging thread, decoding threads, pinned bytes,
        workers' prefetch): speed only, not recorded (the features do not depend on it).
    worker_every : int
        ``decode_mode="device"``: every ``n``-th row decoded by PIL in the workers beside the device decoder (adds
        the CPUs' decoding to the device's); recorded with the decode path (the two decoders' pixels differ).

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
    name = backbone if isinstance(backbone, str) else backbone.name
    with cli.status(f"featurize: listing {dataset}{' under ' + str(data_dir) if data_dir else ''} and loading "
                    f"{name}", enabled=progress, after=0.0, log_every=cli.LOG_EVERY):
        splits = list(splits) if splits else dataset_splits(dataset, data_dir)
        sources = [open_split(dataset, s, data_dir) for s in splits]  # fail on bad data before loading a model
        bb = load_backbone(backbone, head=head, weights=weights)
    out = out or default_out(bb.config.name, bb.head, dataset, data_dir)
    mode = decode.resolve_mode(decode_mode, dev)
    decode.check_worker_every(worker_every, mode)
    # the decode path is provenance: draft, device and full decoding give slightly different features, which
    # one store must not mix (a resume with another path is refused like one with another backbone)
    root_attrs = {**bb.provenance(), "dataset": sources[0].dataset, "classes": sources[0].classes,
                  "decode": decode.describe(mode, worker_every)}
    for src in sources:  # every split's layout and the store's provenance checked before anything is written
        stores.check_split(out, src.split, n_rows=len(src), dim=bb.dim, dtype=dtype, shard_rows=shard_rows,
                           root_attrs=root_attrs)
    bb.model.to(dev, memory_format=torch.channels_last)
    workers = min(8, os.cpu_count() or 1) if num_workers is None else num_workers
    summaries = extract_splits(bb, sources, out, assignment=assignment, device=dev, dtype=dtype,
                               batch_size=batch_size, num_workers=workers, shard_rows=shard_rows, skip_bad=skip_bad,
                               decode_mode=mode, root_attrs=root_attrs, progress=progress, feed=feed,
                               worker_every=worker_every)
    return {"out": str(out), "splits": summaries}
