"""Where ``featurize --decode device`` spends its time: each piece of the job alone, then the job end to end with each
:class:`featurize.job.Feed` option, on the same photo-like JPEGs, in one run (issue 39: on an H100, 3560 img/s end
to end against a 7640 img/s forward, 2.15x).

    PYTHONPATH=/tmp/site:$PWD python3 benchmarks/bench_gpu_decode.py --device cuda --out $OUT/gpu_decode.md
    python benchmarks/bench_gpu_decode.py --device cpu --images 64      # the same code on the CPU, tiny sizes

Pieces (img/s; every GPU timing ends in a synchronize):

* **a. decode**: ``torchvision.io.decode_jpeg`` on the device alone (``featurize.decode.decode_jpegs``) in batches
  of 64..512; a batch split over 2/4 threads, each with its own CUDA stream; page-locked input bytes; and how long
  the call blocks the calling thread (torchvision's nvJPEG wrapper waits for its own stream under a process-wide
  lock, so threads can only overlap what surrounds it).
* **b. resize + crop** alone on decoded images: grouped by size (``decode.resize_crop``, what the job does) vs one
  image per call; decode + resize + crop together (``decode.decode_batch``), in one piece and in chunks on threads.
* **c. ``_stage``** alone (the job's staging of a batch the workers handed over: decode_batch, PIL fallback, copies).
* **d. worker side** alone: the job's DataLoader in device mode (workers read bytes and JPEG headers; nothing runs on
  the GPU) for several worker counts: first-batch latency (worker start) and the steady rate after it.
* **e. forward** alone on pre-decoded batches from host memory (what bench_featurize calls "forward") and from
  device memory; **overlap**: a decode queued beside a forward against each alone.
* **f. end to end** ``extract_split`` with each Feed option: img/s, ratio to the forward, the first batch's latency,
  the steady rate between the first and the last batch, and the tail (store finalize); then the first options
  once more over the files ``--long`` times (a longer job: the workers' start and the pipeline's fill and drain
  weigh less, as in a job over millions of images).

``--budget`` seconds bound the run: pieces that would start after it are listed as skipped. The table is rewritten
to ``--out`` after every piece, so a run cut short still leaves what it measured.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import backbones  # noqa: E402
from bench_featurize import make_jpegs, random_weights, vit_b_config  # noqa: E402
from featurize import decode, open_split  # noqa: E402
from featurize import job  # noqa: E402
from featurize.job import Feed, _Batch, _Collate, _forward, _Rows, _stage, resolve_device, shard_batches  # noqa: E402


class Probe:
    """The run's state: device, data, model, the rows measured so far and the time budget."""

    def __init__(self, args):
        self.args, self.t0 = args, time.perf_counter()
        self.device = resolve_device(args.device)
        self.cuda = self.device.type == "cuda"
        self.rows, self.e2e, self.notes, self.pixels = [], [], [], None

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def left(self) -> float:
        return self.args.budget - (time.perf_counter() - self.t0)

    def timed(self, fn, repeats=None) -> float:
        """Best wall time of ``fn()`` over the repeats, synchronized before and after."""
        best = math.inf
        for _ in range(repeats or self.args.repeats):
            self.sync()
            t = time.perf_counter()
            fn()
            self.sync()
            best = min(best, time.perf_counter() - t)
        return best

    def row(self, piece, variant, images, seconds, note=""):
        self.rows.append(f"| {piece} | {variant} | {images} | {images / seconds:,.0f} | {note} |")
        print(self.rows[-1], flush=True)

    def stream(self):
        return torch.cuda.Stream(self.device) if self.cuda else None

    def streams(self, k):
        return [self.stream() for _ in range(k)]

    def write(self):
        a = self.args
        name = torch.cuda.get_device_name(self.device) if self.cuda else platform.processor() or platform.machine()
        with open(a.out, "w") as f:
            f.write("## featurize --decode device: where the time goes (benchmarks/bench_gpu_decode.py, one run)\n\n")
            f.write(f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {name}, "
                    f"{os.cpu_count()} CPUs, torch {torch.__version__}, device {self.device}; {a.model} `cls`, "
                    f"{a.images} photo-like JPEGs {a.size}, batch {a.batch}, {a.workers} workers, best of "
                    f"{a.repeats}; {time.perf_counter() - self.t0:.0f} s.\n\n")
            f.write("| piece | variant | images | img/s | note |\n|---|---|---|---|---|\n")
            f.write("\n".join(self.rows) + "\n\n")
            if self.e2e:
                f.write("End to end (`featurize.job.extract_split`, model loaded, fresh store each run):\n\n")
                f.write("| Feed option | rows | batch | workers | img/s | / forward (host batches) | first batch s "
                        "| steady img/s | tail s |\n|---|---|---|---|---|---|---|---|---|\n" + "\n".join(self.e2e)
                        + "\n\n")
            if self.pixels:
                f.write(f"Pixels: {self.pixels}.\n\n")
            for n in self.notes:
                f.write(f"- {n}\n")


def decode_pieces(p: Probe, jpegs, sizes, pre):
    """a (decode alone) and b (resize + crop, decode_batch)."""
    n, dev, B = len(jpegs), p.device, p.args.batch
    decode.decode_jpegs(jpegs[:8], dev)  # the decoder's handles and buffers are made on first use
    p.sync()
    sizes_b = sorted({min(b, n) for b in ((64, 128, 256, 512) if p.cuda else (8, 16, 32))})
    for b in sizes_b:
        t = p.timed(lambda: [decode.decode_jpegs(jpegs[a:a + b], dev) for a in range(0, n, b)])
        p.row("a. decode", f"decode_jpeg, batch {b}", n, t)
    # how long one call blocks the calling thread (no synchronize after it) against the synchronized time
    synced = p.timed(lambda: [decode.decode_jpegs(jpegs[a:a + B], dev) for a in range(0, n, B)])
    host = math.inf
    for _ in range(p.args.repeats):
        p.sync()
        t = time.perf_counter()
        for a in range(0, n, B):
            decode.decode_jpegs(jpegs[a:a + B], dev)
        host = min(host, time.perf_counter() - t)
    p.sync()
    p.row("a. decode", f"batch {B}, calls not synchronized (host blocked)", n, host,
          f"the calls hold their thread {host / synced:.0%} of the synchronized time")
    for k in (2, 4):
        streams = p.streams(k)
        with ThreadPoolExecutor(k) as pool:
            def split(a):
                part = jpegs[a:a + B]
                bounds = [len(part) * c // k for c in range(k + 1)]

                def one(c):
                    with torch.cuda.stream(streams[c]) if streams[c] is not None else contextlib.nullcontext():
                        return decode.decode_jpegs(part[bounds[c]:bounds[c + 1]], dev)
                return list(pool.map(one, range(k)))
            t = p.timed(lambda: [split(a) for a in range(0, n, B)])
        p.row("a. decode", f"batch {B} split over {k} threads, a stream each", n, t)
    if p.cuda:
        buffer = torch.cat(jpegs).pin_memory()
        offsets = np.cumsum([0] + [len(j) for j in jpegs]).tolist()
        pinned = [buffer[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
        t = p.timed(lambda: [decode.decode_jpegs(pinned[a:a + B], dev) for a in range(0, n, B)])
        p.row("a. decode", f"batch {B}, page-locked bytes", n, t)
    p.write()

    decoded = [decode.decode_jpegs(jpegs[a:a + B], dev) for a in range(0, n, B)]
    t = p.timed(lambda: [decode.resize_crop(d, sizes[a:a + B], pre) for d, a in zip(decoded, range(0, n, B))])
    p.row("b. resize + crop", "grouped by size (the job's)", n, t)
    t = p.timed(lambda: [decode.resize_crop([im], [s], pre) for im, s in zip(sum(decoded, []), sizes)])
    p.row("b. resize + crop", "one image per call", n, t)
    del decoded
    # the device path's pixels against PIL's full decode + the backbone's transform (the CPU path), 64 images
    m = min(n, 64)
    got = decode.decode_batch(jpegs[:m], sizes[:m], pre, dev)
    transform = backbones.preprocessing.geometry_transform(pre)
    diffs = [(g.cpu().float() - transform(decode.open_rgb(j.numpy().tobytes(), pre, draft=False)).float()).abs()
             for g, j in zip(got, jpegs[:m])]
    p.pixels = (f"device path ({'nvJPEG' if p.cuda else 'libjpeg-turbo'} + torch resize) against PIL's full decode "
                f"+ the backbone's transform, {m} JPEGs {p.args.size} -> {pre.crop} px: mean abs difference "
                f"{float(torch.stack([d.mean() for d in diffs]).mean()):.3f} grey levels (of 255), largest image "
                f"mean {max(float(d.mean()) for d in diffs):.3f}, max {max(float(d.max()) for d in diffs):.0f}")
    print(p.pixels, flush=True)
    t = p.timed(lambda: [decode.decode_batch(jpegs[a:a + B], sizes[a:a + B], pre, dev) for a in range(0, n, B)])
    p.row("b. decode + resize + crop", f"decode_batch, batch {B}", n, t)
    for k in (2, 4):
        streams = p.streams(k)
        t = p.timed(lambda: [decode.decode_batch(jpegs[a:a + B], sizes[a:a + B], pre, dev, streams=streams)
                             for a in range(0, n, B)])
        p.row("b. decode + resize + crop", f"decode_batch in {k} chunks (threads/streams)", n, t)
    p.write()


def batches_of(jpegs, sizes, keys, crop, pin=False):
    """The job's batches as the workers hand them over (``_Batch``), made here from bytes already read."""
    out = []
    for rows in keys:
        b = _Batch([(0, i, "jpeg", (jpegs[i], sizes[i])) for i in rows], crop, pin)
        out.append(b.pin_memory() if pin else b)
    return out


def stage_pieces(p: Probe, bb, jpegs, sizes, keys):
    """c (``_stage`` alone), e (forward alone, overlap) and the serialized stage-then-forward."""
    pre, dev, n = bb.config.preprocessing, p.device, len(jpegs)
    stream = p.stream()
    plain = batches_of(jpegs, sizes, keys, pre.crop)
    variants = [("as the job (side stream)", plain, None)]
    variants.append(("decode_threads=2", plain, p.streams(2)))
    if p.cuda:
        variants.append(("page-locked bytes", batches_of(jpegs, sizes, keys, pre.crop, pin=True), None))
    for label, batches, chunks in variants:
        t = p.timed(lambda: [_stage(b, dev, pre, bb.transform, stream, chunks) for b in batches])
        p.row("c. _stage", label, n, t)
    staged = [_stage(b, dev, pre, bb.transform, stream, None)[0] for b in plain]
    p.sync()
    host = [x.cpu().pin_memory() if p.cuda else x for x in staged]

    def forward(xs):
        for x in xs:
            _forward(bb.model, x, dev).float().cpu()
    forward(host[:1])  # kernels and allocator warm
    t_host = p.timed(lambda: forward(host))
    p.row("e. forward", "uint8 batches from host memory (bench_featurize's forward)", n, t_host)
    t_dev = p.timed(lambda: forward(staged))
    p.row("e. forward", "uint8 batches already on the device", n, t_dev)

    def serial():
        for b in plain:
            x, _, event = _stage(b, dev, pre, bb.transform, stream, None)
            p.sync()
            _forward(bb.model, x, dev).float().cpu()
    t = p.timed(serial)
    p.row("e. stage then forward", "serialized (no overlap)", n, t)

    if p.cuda:  # does a decode on a side stream run beside a forward (nvJPEG's engines vs the SMs)?
        side = p.stream()
        B = p.args.batch

        def forwards():
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
                for x in staged:
                    bb.model(x.contiguous(memory_format=torch.channels_last))

        def decodes():
            with torch.cuda.stream(side):
                for a in range(0, n, B):
                    decode.decode_batch(jpegs[a:a + B], sizes[a:a + B], pre, dev)
        t_f, t_d = p.timed(forwards), p.timed(decodes)
        t_both = p.timed(lambda: (forwards(), decodes()))  # forwards queued first, decoding then runs beside them
        overlap = (t_f + t_d - t_both) / min(t_f, t_d)
        p.row("e. overlap", "forwards queued, then decode_batch on a side stream", n, t_both,
              f"forward alone {n / t_f:,.0f}, decode alone {n / t_d:,.0f} img/s; overlap {overlap:.0%} of the "
              "shorter")
    p.write()
    return n / t_host


def worker_pieces(p: Probe, bb, source, keys):
    """d: the job's DataLoader alone (no GPU work): in device mode (workers read bytes and headers) for several
    worker counts, and in draft mode (workers decode with PIL: their rate bounds what ``worker_every`` adds)."""
    pre = bb.config.preprocessing
    counts = sorted({w for w in ((4, 8, 16) if p.cuda else (1, 2)) if w <= max(p.args.workers, 1)} |
                    {p.args.workers})
    runs = [(w, prefetch, "device") for w in counts for prefetch in ((4, 2) if w == p.args.workers else (4,))]
    runs.append((p.args.workers, 4, "draft"))
    for r, (w, prefetch, mode) in enumerate(runs):
        loader = job.DataLoader(_Rows([source], bb.transform, pre, mode), batch_sampler=keys,
                                collate_fn=_Collate(pre.crop), num_workers=w, pin_memory=p.cuda,
                                prefetch_factor=prefetch, multiprocessing_context=job.worker_context())
        t = time.perf_counter()
        first, rows = None, 0
        for b in loader:
            if first is None:
                first, head = time.perf_counter(), len(b.keys)
            rows += len(b.keys)
            assert not b.errors, b.errors
        end = time.perf_counter()
        note = f"first batch after {first - t:.2f} s"
        if r == 0 and p.cuda:
            note += " (incl. the fork server's start, paid once per process)"
        if rows > head and end > first:
            note += f"; steady {(rows - head) / (end - first):,.0f} img/s"
        piece = "d. workers (bytes + headers)" if mode == "device" else "d. workers decoding (PIL, draft)"
        p.row(piece, f"{w} workers, prefetch {prefetch}", rows, end - t, note)
    p.write()


def options(p: Probe):
    """(label, Feed, batch, workers, decode mode, worker_every) of the end-to-end runs, the most telling first (in
    case the budget ends the run)."""
    B, W = p.args.batch, p.args.workers
    return [("default: Feed()", Feed(), B, W, "device", 0),
            ("ahead=1", Feed(ahead=1), B, W, "device", 0),
            ("ahead=1, worker_every=4", Feed(ahead=1), B, W, "device", 4),
            ("ahead=2", Feed(ahead=2), B, W, "device", 0),
            ("decode_threads=2", Feed(decode_threads=2), B, W, "device", 0),
            ("ahead=1, decode_threads=2", Feed(ahead=1, decode_threads=2), B, W, "device", 0),
            ("ahead=1, pin_bytes", Feed(ahead=1, pin_bytes=True), B, W, "device", 0),
            ("ahead=1, worker_every=3", Feed(ahead=1), B, W, "device", 3),
            ("ahead=1, batch x2", Feed(ahead=1), 2 * B, W, "device", 0),
            ("ahead=1, prefetch 2, half the workers", Feed(ahead=1, prefetch=2), B, max(1, W // 2), "device", 0),
            ("ahead=1, worker_every=2", Feed(ahead=1), B, W, "device", 2),
            ("draft (workers decode, PIL)", Feed(), B, W, "draft", 0)]


def repeated(source, k: int):
    """The split's files ``k`` times over (ids made unique): a longer job without making more JPEGs, so that the
    workers' start and the pipeline's fill and drain weigh less."""
    from featurize.datasets import FileImages, ImageSplit
    return ImageSplit(source.dataset, source.split, [f"{r}/{i}" for r in range(k) for i in source.ids],
                      np.tile(source.labels, k), source.classes, FileImages(list(source.images.paths) * k),
                      dict(source.attrs))


def end_to_end(p: Probe, bb, source, runs, repeats, forward_rate, tmp):
    """f: ``extract_split`` with each of ``runs`` (see :func:`options`), best of ``repeats``; per run the times of
    every batch's arrival at the store give the first batch's latency, the steady rate and the tail."""
    marks = []
    real_add = job._SplitJob.add

    def add(self, rows, feats, errors, pool):
        real_add(self, rows, feats, errors, pool)
        marks.append((time.perf_counter(), len(rows)))
    job._SplitJob.add = add
    n = len(source)
    try:
        best = {}
        for r in range(repeats):
            for label, feed, batch, workers, mode, every in runs:
                if p.left() < 0:
                    p.notes.append(f"budget: end to end `{label}` over {n} rows, repeat {r + 1}, skipped")
                    continue
                marks.clear()
                out = tempfile.mkdtemp(dir=tmp, suffix=".zarr")
                t = time.perf_counter()
                job.extract_split(bb, source, out, device=p.device, batch_size=batch, num_workers=workers,
                                  decode_mode=mode, progress=False, feed=feed, worker_every=every)
                end = time.perf_counter()
                first, head = marks[0]
                last = marks[-1][0]
                steady = (n - head) / (last - first) if last > first else float("nan")
                run = (end - t, first - t, steady, end - last)
                print(f"  {label}, {n} rows: {n / run[0]:,.0f} img/s (repeat {r + 1})", flush=True)
                if label not in best or run[0] < best[label][0]:
                    best[label] = run
        if best:
            fast = min(best, key=lambda k: best[k][0])
            level = max(best, key=lambda k: best[k][2] if best[k][2] == best[k][2] else 0.0)  # NaN: one batch
            p.notes.append(f"over {n} rows: fastest end to end `{fast}` ({n / best[fast][0]:,.0f} img/s, "
                           f"{forward_rate * best[fast][0] / n:.2f}x the forward); highest steady rate `{level}` "
                           f"({best[level][2]:,.0f} img/s)")
        for label, feed, batch, workers, mode, every in runs:
            if label in best:
                e, first, steady, tail = best[label]
                p.e2e.append(f"| {label} | {n} | {batch} | {workers} | {n / e:,.0f} | {forward_rate / (n / e):.2f}x "
                             f"| {first:.2f} | {steady:,.0f} | {tail:.2f} |")
    finally:
        job._SplitJob.add = real_add
    p.write()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--images", type=int, default=None, help="default 4096 on CUDA, 64 elsewhere")
    ap.add_argument("--size", default="500x375", help="JPEG width x height")
    ap.add_argument("--batch", type=int, default=None, help="default 256 on CUDA, 16 elsewhere")
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--model", choices=("vitb", "toy"), default=None,
                    help="ViT-B/16 at 224 px (random weights; default on CUDA) or vip_toy (32 px; default elsewhere)")
    ap.add_argument("--repeats", type=int, default=None, help="default 2 on CUDA, 1 elsewhere")
    ap.add_argument("--long", type=int, default=4,
                    help="then the first options once more over the files this many times (1: not)")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds after which no new end-to-end run starts")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "gpu_decode.md"))
    a = ap.parse_args()
    cuda = resolve_device(a.device).type == "cuda"
    a.images = a.images or (4096 if cuda else 64)
    a.batch = a.batch or (256 if cuda else 16)
    a.model = a.model or ("vitb" if cuda else "toy")
    a.repeats = a.repeats or (2 if cuda else 1)
    width, height = (int(v) for v in a.size.lower().split("x"))
    p = Probe(a)
    print(f"device {p.device}, {a.images} JPEGs {a.size}, batch {a.batch}, {a.workers} workers, model {a.model}",
          flush=True)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        folder = os.path.join(tmp, "jpegs")
        t = time.perf_counter()
        make_jpegs(folder, a.images, width, height, threads=max(1, os.cpu_count() or 1))
        print(f"made {a.images} JPEGs in {time.perf_counter() - t:.1f} s", flush=True)
        source = open_split(f"imagefolder:{folder}", "train")
        datas = [source.images.raw(i) for i in range(len(source))]
        jpegs = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in datas]
        sizes = [decode.device_jpeg_size(d) for d in datas]
        assert all(s is not None for s in sizes), "every probe JPEG is one the device decoder takes"
        if a.model == "vitb":
            bb = backbones.load_backbone(vit_b_config(), head="cls", weights=random_weights(tmp))
        else:
            bb = backbones.load_backbone("vip_toy", head="cls")
        bb.model.to(p.device, memory_format=torch.channels_last)
        pre = bb.config.preprocessing
        keys = shard_batches([(0, len(source))], a.batch)
        decode_pieces(p, jpegs, sizes, pre)
        forward_rate = stage_pieces(p, bb, jpegs, sizes, keys)
        worker_pieces(p, bb, source, [[(0, i) for i in rows] for rows in keys])
        runs = options(p)
        end_to_end(p, bb, source, runs, a.repeats, forward_rate, tmp)
        if a.long > 1:  # the same files a.long times: what a long job sees once the pipeline is full
            longer = ("default: Feed()", "ahead=1", "ahead=1, worker_every=4", "ahead=1, worker_every=3")
            end_to_end(p, bb, repeated(source, a.long), [r for r in runs if r[0] in longer], 1, forward_rate, tmp)
    p.write()
    print(f"wrote {a.out} ({time.perf_counter() - p.t0:.0f} s)")


if __name__ == "__main__":
    main()
