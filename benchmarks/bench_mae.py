"""Benchmark: cost of a DP-MAE step (per-example gradients + clipping) vs a non-private step.

Same model, same physical batch, same mask noise, timings interleaved in one
run (the machine is shared: only ratios are meaningful). Methods:

* ``nonprivate``: forward + backward of the mean loss (one gradient);
* ``vmap``: ``torch.func`` per-example gradients + clip + sum (what DP-MAE runs);
* ``loop``: one backward per example (the naive per-example baseline);
* ``opacus``: opacus ``GradSampleModule`` hooks, when it accepts the model.

Writes markdown rows to ``benchmarks/results/mae.md``.

    python benchmarks/bench_mae.py [--size vip_toy] [--batch 32] [--repeats 5] [--threads 1]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from backbones.mae.model import build_mae  # noqa: E402
from backbones.mae.per_example import clip_and_sum, per_example_grads, split_params  # noqa: E402


def _nonprivate(model, x, noise):
    model.zero_grad(set_to_none=True)
    model(x, noise).mean().backward()


def _vmap(model, x, noise):
    trainable, frozen = split_params(model)
    grads, _ = per_example_grads(model, trainable, frozen, x, noise)
    clip_and_sum(grads, 0.1)


def _loop(model, x, noise):
    for i in range(x.shape[0]):
        model.zero_grad(set_to_none=True)
        model(x[i:i + 1], noise[i:i + 1]).sum().backward()


def _make_opacus(model):
    try:
        from opacus import GradSampleModule

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gsm = GradSampleModule(model)

        def step(_model, x, noise):
            gsm.zero_grad(set_to_none=True)
            gsm(x, noise).sum().backward()
            for p in gsm.parameters():
                p.grad_sample = None
        step(None, torch.randn(2, 3, model.cfg.img_size, model.cfg.img_size),
             torch.rand(2, model.cfg.num_patches))
        return step, None
    except Exception as exc:  # opacus rejects modules with bare nn.Parameters (cls_token, mask_token)
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="vip_toy")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-loop", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "mae.md"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_mae(args.size)
    cfg = model.cfg
    x = torch.randn(args.batch, 3, cfg.img_size, cfg.img_size)
    noise = torch.rand(args.batch, cfg.num_patches)
    methods = {"nonprivate": _nonprivate, "vmap": _vmap}
    if not args.no_loop:
        methods["loop"] = _loop
    opacus_step, opacus_error = _make_opacus(build_mae(args.size))
    if opacus_step is not None:
        methods["opacus"] = opacus_step
    for fn in methods.values():  # warm-up
        fn(model, x, noise)
    times = {k: [] for k in methods}
    for _ in range(args.repeats):  # interleaved, so load drift hits every method alike
        for name, fn in methods.items():
            t = time.perf_counter()
            fn(model, x, noise)
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    machine = f"{os.cpu_count()}-core CPU ({platform.machine()}), shared, torch {args.threads} thread(s), no GPU"
    rows = []
    for name in methods:
        rows.append(f"| {args.size} | {args.batch} | {name} | {1e3 * med[name]:.0f} | "
                    f"{args.batch / med[name]:.1f} | {med[name] / med['nonprivate']:.2f}x | {machine} |")
    if opacus_error:
        rows.append(f"| {args.size} | {args.batch} | opacus | - | - | not run: {opacus_error} | {machine} |")
    header = ("| model | physical batch | method | ms / step (median of "
              f"{args.repeats}) | images/s | vs non-private | machine |\n|---|---|---|---|---|---|---|")
    text = "\n".join(rows)
    print(header + "\n" + text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    new = not os.path.exists(args.out)
    with open(args.out, "a") as f:
        if new:
            f.write("## DP-MAE: per-example-gradient step vs non-private step (benchmarks/bench_mae.py)\n\n")
        f.write(header + "\n" + text + "\n\n")


if __name__ == "__main__":
    main()
