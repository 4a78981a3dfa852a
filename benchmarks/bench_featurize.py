"""Featurize end to end vs the pure model forward on the same batches, in one run (ratios, not absolute speed).

    python benchmarks/bench_featurize.py [--device auto] [--repeats 3] [--out benchmarks/results/featurize.md]

For each case the same images go through

* **forward**: the backbone's model on pre-decoded ``uint8`` batches already in memory (inference mode,
  channels-last, bf16 autocast on CUDA) — the floor any extraction job pays;
* **featurize**: :func:`featurize.extract_split` — JPEG decoding and resizing in DataLoader workers, the same
  forward, shard writes into a fresh feature store (crc32c, zarr) — with the model already loaded.

Ratio = featurize time / forward time (goal <= 1.15). Cases: ``vip_toy`` (the shipped 32px ViT) with the
``cls`` and ``blocks`` heads, and ViT-B/16 at 224px (``vip_base`` architecture with weights drawn at random and
saved to a temporary file: a speed measurement, not a model). On CUDA it also reports ViT-B/16 images/s with
synthetic input and with real JPEG decoding.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import sys
import tempfile
import time

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import backbones  # noqa: E402
from featurize import open_split  # noqa: E402
from featurize.job import extract_split, resolve_device, shard_batches  # noqa: E402


def make_jpegs(root, n, size):
    rng = np.random.default_rng(0)
    for i in range(n):
        d = os.path.join(root, f"c{i % 4}")
        os.makedirs(d, exist_ok=True)
        # smooth random images compress like photos (pure noise JPEGs decode unrealistically slowly)
        small = rng.integers(0, 256, (size // 8, size // 8, 3), dtype=np.uint8)
        Image.fromarray(small).resize((size, size), Image.BICUBIC).save(os.path.join(d, f"{i:05d}.jpg"), quality=90)


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


def time_featurize(bb, source, device, batch_size, workers, tmp) -> tuple[float, float]:
    out = tempfile.mkdtemp(dir=tmp, suffix=".zarr")
    c, t = cpu_seconds(), time.perf_counter()
    extract_split(bb, source, out, device=device, batch_size=batch_size, num_workers=workers, progress=False)
    return time.perf_counter() - t, cpu_seconds() - c


def run_case(name, bb, folder, device, batch_size, workers, repeats, tmp):
    source = open_split(f"imagefolder:{folder}", "train")
    rows = shard_batches([(0, len(source))], batch_size)
    batches = [torch.stack([bb.transform(source.read(i)) for i in b]) for b in rows]
    time_forward(bb, batches[:1], device)  # warm up kernels / allocator
    fwd, e2e = [], []
    for _ in range(repeats):  # alternate so background load hits both alike
        fwd.append(time_forward(bb, batches, device))
        e2e.append(time_featurize(bb, source, device, batch_size, workers, tmp))
    (f, fc), (e, ec) = min(fwd), min(e2e)
    n = len(source)
    row = (f"| {name} | {bb.head} ({bb.dim}-d) | {n} | {batch_size} | {workers} | {n / f:.3g} | {n / e:.3g} "
           f"| {e / f:.2f}x | {ec / fc:.2f}x |")
    print(row, flush=True)
    return row


def gpu_rows(device, tmp, batch_size=256, steps=20):
    """ViT-B/16 images/s on one GPU: synthetic uint8 input, then real JPEG decoding end to end."""
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
    folder = os.path.join(tmp, "gpu_jpegs")
    make_jpegs(folder, 4096, 256)
    source = open_split(f"imagefolder:{folder}", "train")
    workers = min(16, os.cpu_count() or 1)
    secs, _ = time_featurize(bb, source, device, batch_size, workers, tmp)
    name = torch.cuda.get_device_name(device)
    return [f"| ViT-B/16 cls, synthetic uint8 input, bf16 autocast | {name} | {synthetic:.0f} img/s |",
            f"| ViT-B/16 cls, featurize 4096 JPEGs 256px ({workers} workers) | {name} "
            f"| {len(source) / secs:.0f} img/s |"]


def vit_b_config():
    return backbones.get_config("vip_base")


def random_weights(tmp):
    path = os.path.join(tmp, "vit_b_random.pth")
    if not os.path.exists(path):
        torch.manual_seed(0)
        torch.save({"model": backbones.build_architecture(vit_b_config()).state_dict()}, path)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    p.add_argument("--toy-images", type=int, default=2048)
    p.add_argument("--vitb-images", type=int, default=32)
    p.add_argument("--vitb-repeats", type=int, default=2)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "featurize.md"))
    args = p.parse_args()
    device = resolve_device(args.device)
    header = ["| case | head | images | batch | workers | forward img/s | featurize img/s | featurize / forward "
              "(wall) | featurize / forward (CPU time) |", "|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(header))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        toy_dir, vitb_dir = os.path.join(tmp, "toy"), os.path.join(tmp, "vitb")
        make_jpegs(toy_dir, args.toy_images, 48)
        make_jpegs(vitb_dir, args.vitb_images, 256)
        toy_weights = backbones.resolve_weights(backbones.get_config("vip_toy")) if os.path.exists(
            os.path.join(os.path.dirname(backbones.__file__), "weights", "vip_toy.pth")) else None
        if toy_weights is None:
            torch.manual_seed(0)
            toy_weights = os.path.join(tmp, "toy.pth")
            torch.save({"model": backbones.build_architecture(backbones.get_config("vip_toy")).state_dict()},
                       toy_weights)
        for head in ("cls", "blocks"):
            bb = backbones.load_backbone("vip_toy", head=head, weights=toy_weights)
            bb.model.to(device, memory_format=torch.channels_last)
            rows.append(run_case("vip_toy 32px, JPEG 48px", bb, toy_dir, device, 256, args.workers, args.repeats,
                                 tmp))
        bb = backbones.load_backbone(vit_b_config(), head="cls", weights=random_weights(tmp))
        bb.model.to(device, memory_format=torch.channels_last)
        rows.append(run_case("ViT-B/16 224px, JPEG 256px", bb, vitb_dir, device, 128 if device.type == "cuda" else 16,
                             args.workers, args.vitb_repeats, tmp))
        gpu = gpu_rows(device, tmp) if device.type == "cuda" else []
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
               f"threads {torch.get_num_threads()}, device {device}")
    with open(args.out, "w") as f:
        f.write("## featurize: end to end vs pure forward (one run)\n\n")
        f.write(f"Measured {datetime.date.today()} on {machine}. `python benchmarks/bench_featurize.py`; "
                "best of the repeats (alternated); forward = model on pre-decoded batches in memory, featurize = "
                "decode in workers + same forward + store writes (model already loaded). Goal: wall ratio <= 1.15. "
                "CPU time (process + workers) is shown because on a shared 2-core box decoding competes with the "
                "model for the same cores and wall times of other jobs leak in; on a GPU box decoding overlaps "
                "the forward instead.\n\n")
        f.write("\n".join(header + rows) + "\n\n")
        if gpu:
            f.write("| GPU case | device | throughput |\n|---|---|---|\n" + "\n".join(gpu) + "\n")
        else:
            f.write("No GPU in this run: the ViT-B/16 GPU throughput rows (goal >= 3000 img/s on an H100, synthetic "
                    "input and real JPEG decoding) are not measured; rerun this script on a CUDA machine.\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
