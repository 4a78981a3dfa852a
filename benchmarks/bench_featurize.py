"""Featurize end to end vs the pure model forward on the same batches, per decode path, in one run (ratios).

    python benchmarks/bench_featurize.py [--device auto] [--repeats 2] [--out benchmarks/results/featurize.md]

For each case the same images go through

* **forward**: the backbone's model on pre-decoded ``uint8`` batches already in memory (inference mode,
  channels-last, bf16 autocast on CUDA) — the floor any extraction job pays;
* **featurize**: :func:`featurize.extract_split` with the model already loaded — decoding (``--decode`` path:
  ``full`` PIL decode or ``draft`` DCT-scaled PIL decode in DataLoader workers, or ``device``: batches decoded by
  torchvision on the device, nvJPEG on CUDA), the same forward, shard writes into a fresh store.

Ratio = featurize time / forward time (goal <= 1.3). JPEGs are photo-like (a smooth colour field plus sensor-like
noise, ~90 KB at 500x375, ImageNet's typical size). Cases: ``vip_toy`` (the shipped 32 px ViT, ``cls`` and
``blocks``) and ViT-B/16 (``vip_base`` architecture, 256 px resize, 224 px crop, weights drawn at random: a speed
measurement, not a model). A decode table times decode + resize + crop alone per image (one process) and the
pixel difference of draft against full decoding, on 500x375 and 1024x768 JPEGs. On CUDA the GPU table adds
ViT-B/16 on synthetic input and end to end from ``--gpu-images`` JPEGs with device vs worker (draft) decoding.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import backbones  # noqa: E402
from featurize import decode, open_split  # noqa: E402
from featurize.job import extract_split, extract_splits, resolve_device, shard_batches  # noqa: E402


def photo_jpeg(rng, width, height) -> bytes:
    """A photo-like JPEG: a smooth random colour field plus noise (pure-noise JPEGs decode unrealistically
    slowly, pure smooth ones unrealistically fast); ~90 KB at 500x375, quality 90."""
    small = rng.integers(0, 256, (height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
    px = np.asarray(Image.fromarray(small).resize((width, height), Image.BICUBIC)).astype(np.float32)
    px += rng.normal(0, 14, px.shape).astype(np.float32)
    b = io.BytesIO()
    Image.fromarray(np.clip(px, 0, 255).astype(np.uint8)).save(b, "JPEG", quality=90)
    return b.getvalue()


def make_jpegs(root, n, width, height, threads=8):
    def one(i):
        d = os.path.join(root, f"c{i % 4}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{i:05d}.jpg"), "wb") as f:
            f.write(photo_jpeg(np.random.default_rng(i), width, height))
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(n)))


def autocast(device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()


def cpu_seconds() -> float:
    """User + system CPU time of this process and its reaped children (the DataLoader workers)."""
    import resource
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def time_forward(bb, batches, device) -> tuple[float, float]:
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    c, t = cpu_seconds(), time.perf_counter()
    with torch.inference_mode(), autocast(device):
        for x in batches:
            x = x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
            bb.model(x).float().cpu()
    sync()
    return time.perf_counter() - t, cpu_seconds() - c


def time_featurize(bb, source, device, batch_size, workers, tmp, mode) -> tuple[float, float]:
    out = tempfile.mkdtemp(dir=tmp, suffix=".zarr")
    c, t = cpu_seconds(), time.perf_counter()
    extract_split(bb, source, out, device=device, batch_size=batch_size, num_workers=workers, decode_mode=mode,
                  progress=False)
    return time.perf_counter() - t, cpu_seconds() - c


def run_case(name, bb, folder, device, batch_size, workers, repeats, tmp, modes):
    """One row per decode mode: forward and featurize alternated ``repeats`` times, best of each."""
    source = open_split(f"imagefolder:{folder}", "train")
    rows = shard_batches([(0, len(source))], batch_size)
    with ThreadPoolExecutor(min(16, os.cpu_count() or 1)) as pool:  # PIL decodes without the GIL
        batches = [torch.stack(list(pool.map(lambda i: bb.transform(source.read(i)), b))) for b in rows]
    time_forward(bb, batches[:1], device)  # warm up kernels / allocator
    fwd, e2e = [], {m: [] for m in modes}
    for _ in range(repeats):  # alternate so background load hits all alike
        fwd.append(time_forward(bb, batches, device))
        for m in modes:
            e2e[m].append(time_featurize(bb, source, device, batch_size, workers, tmp, m))
    f, fc = min(fwd)
    n = len(source)
    out = []
    for m in modes:
        e, ec = min(e2e[m])
        out.append(f"| {name} | {bb.head} ({bb.dim}-d) | {m} | {n} | {batch_size} | {workers} | {n / f:.3g} "
                   f"| {n / e:.3g} | {e / f:.2f}x | {ec / fc:.2f}x |")
        print(out[-1], flush=True)
    return out


def decode_rows(n=32):
    """Decode + resize + crop per image in this process: full vs draft (PIL), and torchvision's decoder on the CPU
    through the device path's batch function; mean abs pixel difference of each against the full decode."""
    out = []
    cpu = torch.device("cpu")
    for (w, h) in ((500, 375), (1024, 768)):
        datas = [photo_jpeg(np.random.default_rng(1000 + i), w, h) for i in range(n)]
        jpegs = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in datas]
        for label, pre in (("32 px (vip_toy)", backbones.get_config("vip_toy").preprocessing),
                           ("256 -> 224 px (ViT-B/16)", vit_b_config().preprocessing)):
            transform = backbones.preprocessing.geometry_transform(pre)
            ms, crops = {}, {}
            for path in ("full", "draft", "device"):
                t = time.perf_counter()
                if path == "device":
                    crops[path] = decode.decode_batch(jpegs, [decode.device_jpeg_size(d) for d in datas], pre, cpu)
                else:
                    crops[path] = [transform(decode.open_rgb(d, pre, draft=path == "draft")) for d in datas]
                ms[path] = (time.perf_counter() - t) / n * 1e3
            diff = {p: float(torch.stack([(a.float() - b.float()).abs().mean()
                                          for a, b in zip(crops[p], crops["full"])]).mean()) for p in ms}
            scaled = decode.decode_draft(datas[0], pre.resize)[0].size
            out.append(f"| {w}x{h} | {label} | {scaled[0]}x{scaled[1]} | {ms['full']:.2f} | {ms['draft']:.2f} "
                       f"| {ms['full'] / ms['draft']:.2f}x | {diff['draft']:.2f} | {ms['device']:.2f} "
                       f"| {diff['device']:.2f} |")
            print(out[-1], flush=True)
    return out


def startup_row(bb, device, workers, repeats, tmp, n=32):
    """Three splits of ``n`` small JPEGs: one job (one worker pool, :func:`extract_splits`) vs a job per split (a
    pool each, as before issue 39); the difference is two pools' start-up (a fork server's once CUDA is up)."""
    root = os.path.join(tmp, "splits")
    for split in ("train", "val", "test"):
        make_jpegs(os.path.join(root, split), n, 64, 48)
    sources = [open_split(f"imagefolder:{root}", s) for s in ("train", "val", "test")]
    one, each = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        extract_splits(bb, sources, tempfile.mkdtemp(dir=tmp, suffix=".zarr"), device=device, batch_size=16,
                       num_workers=workers, progress=False)
        one.append(time.perf_counter() - t)
        t = time.perf_counter()
        out = tempfile.mkdtemp(dir=tmp, suffix=".zarr")
        for src in sources:
            extract_split(bb, src, out, device=device, batch_size=16, num_workers=workers, progress=False)
        each.append(time.perf_counter() - t)
    row = (f"| 3 splits x {n} JPEGs 64x48, {workers} workers | {min(one):.2f} s | {min(each):.2f} s "
           f"| {(min(each) - min(one)) / 2:.2f} s |")
    print(row, flush=True)
    return row


def gpu_rows(device, tmp, n_images, workers, repeats, batch_size=256, steps=20):
    """ViT-B/16 on one GPU: the model alone on synthetic uint8 input, then end to end from ImageNet-size JPEGs at
    224 px with device (nvJPEG) vs worker (draft) decoding against the forward on the same pre-decoded batches."""
    bb = backbones.load_backbone(vit_b_config(), head="cls", weights=random_weights(tmp))
    bb.model.to(device, memory_format=torch.channels_last)
    x = torch.randint(0, 256, (batch_size, 3, 224, 224), dtype=torch.uint8, device=device)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode(), autocast(device):
        for _ in range(3):
            bb.model(x)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(steps):
            bb.model(x)
        torch.cuda.synchronize()
    synthetic = steps * batch_size / (time.perf_counter() - t)
    name = torch.cuda.get_device_name(device)
    print(f"{name}: ViT-B/16 synthetic {synthetic:.0f} img/s", flush=True)
    folder = os.path.join(tmp, "gpu_jpegs")
    make_jpegs(folder, n_images, 500, 375, threads=workers)
    rows = run_case(f"ViT-B/16 224px, JPEG 500x375, {name}", bb, folder, device, batch_size, workers, repeats, tmp,
                    ("device", "draft"))
    return synthetic, name, rows


def vit_b_config():
    return backbones.get_config("vip_base")


def random_weights(tmp):
    path = os.path.join(tmp, "vit_b_random.pth")
    if not os.path.exists(path):
        torch.manual_seed(0)
        torch.save({"model": backbones.build_architecture(vit_b_config()).state_dict()}, path)
    return path


HEADER = ["| case | head | decode | images | batch | workers | forward img/s | featurize img/s | featurize / forward "
          "(wall) | featurize / forward (CPU time) |", "|---|---|---|---|---|---|---|---|---|---|"]
DECODE_HEADER = ["| JPEG | target | draft decodes at | full ms/img | draft ms/img | speed-up | draft: mean abs "
                 "pixel difference (of 255) | device path on the CPU ms/img | device path: mean abs pixel difference |",
                 "|---|---|---|---|---|---|---|---|---|"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    p.add_argument("--cases", nargs="+", default=["decode", "toy", "vitb", "startup"],
                   choices=["decode", "toy", "vitb", "startup"])
    p.add_argument("--toy-images", type=int, default=512)
    p.add_argument("--toy-batch", type=int, default=256)
    p.add_argument("--vitb-images", type=int, default=24)
    p.add_argument("--vitb-repeats", type=int, default=1)
    p.add_argument("--gpu-images", type=int, default=4096)
    p.add_argument("--gpu-workers", type=int, default=min(16, os.cpu_count() or 1))
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "featurize.md"))
    args = p.parse_args()
    device = resolve_device(args.device)
    cpu_modes = ("full", "draft") + (("device",) if device.type == "cuda" else ())
    t0 = time.perf_counter()
    print("\n".join(DECODE_HEADER))
    decode_table = decode_rows() if "decode" in args.cases else []
    print("\n".join(HEADER))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        toy_dir, vitb_dir = os.path.join(tmp, "toy"), os.path.join(tmp, "vitb")
        if "toy" in args.cases:
            make_jpegs(toy_dir, args.toy_images, 500, 375)
        if "vitb" in args.cases:
            make_jpegs(vitb_dir, args.vitb_images, 500, 375)
        for head in ("cls", "blocks") if "toy" in args.cases else ():
            bb = backbones.load_backbone("vip_toy", head=head)
            bb.model.to(device, memory_format=torch.channels_last)
            rows += run_case("vip_toy 32px, JPEG 500x375", bb, toy_dir, device, args.toy_batch, args.workers,
                             args.repeats, tmp, cpu_modes)
        startup = None
        if "startup" in args.cases:
            bb = backbones.load_backbone("vip_toy", head="cls")
            bb.model.to(device, memory_format=torch.channels_last)
            startup = startup_row(bb, device, args.workers, args.repeats, tmp)
        if "vitb" in args.cases:
            bb = backbones.load_backbone(vit_b_config(), head="cls", weights=random_weights(tmp))
            bb.model.to(device, memory_format=torch.channels_last)
            rows += run_case("ViT-B/16 224px, JPEG 500x375", bb, vitb_dir, device,
                             128 if device.type == "cuda" else 8, args.workers, args.vitb_repeats, tmp, cpu_modes)
        gpu = gpu_rows(device, tmp, args.gpu_images, args.gpu_workers, args.repeats) if device.type == "cuda" \
            else None
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
               f"threads {torch.get_num_threads()}, device {device}")
    with open(args.out, "w") as f:
        f.write("## featurize: end to end vs pure forward, per decode path (one run)\n\n")
        f.write(f"Measured {datetime.date.today()} on {machine}, {time.perf_counter() - t0:.0f} s. "
                "`python benchmarks/bench_featurize.py`; best of the repeats (alternated); forward = model on "
                "pre-decoded batches in memory, featurize = decode + same forward + store writes (model already "
                "loaded). Goal: wall ratio <= 1.3.\n\n")
        if decode_table:
            f.write("\n".join(DECODE_HEADER + decode_table) + "\n\n")
        f.write("\n".join(HEADER + rows) + "\n\n")
        if startup:
            f.write("| worker start-up (vip_toy cls) | one job over the splits | a job per split | one pool's start "
                    "|\n|---|---|---|---|\n" + startup + "\n\n")
        if gpu:
            synthetic, name, grows = gpu
            f.write(f"GPU ({name}): ViT-B/16 cls, synthetic uint8 input, batch 256, bf16 autocast: "
                    f"**{synthetic:.0f} img/s**.\n\n" + "\n".join(HEADER + grows) + "\n")
        else:
            f.write("No GPU in this run: `bash benchmarks/gpu_rows.sh OUTDIR featurize` measures the GPU rows.\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
