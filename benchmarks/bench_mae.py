"""Benchmark: cost of a DP-MAE physical batch (per-example clipping + sum) vs a non-private one.

Same model, same physical batch, same images and mask noise; timings
interleaved in one run (the machine is shared: only ratios are meaningful);
peak memory of each method measured alone in a fresh process. Methods:

* ``nonprivate``: forward + backward of the summed loss (one gradient);
* ``ghost``: DP-MAE's fast path (mixed ghost norms + book-keeping, :mod:`backbones.mae.ghost`), float32 norms;
* ``ghost_bf16_norms``: the same with its norms in bf16 (``low_precision_norms=True``, bounded rounding);
* ``ghost_tf32_sums``: the same with its book-keeping GEMMs on TF32 tensor cores on CUDA (``tf32_sums=True``,
  norms inflated by the rounding bound);
* ``vmap``: ``torch.func`` per-example gradients + clip + sum (the reference);
* ``loop``: one backward per example, clip, sum (the naive baseline);
* ``opacus``: opacus ``GradSampleModule`` hooks + its ``DPOptimizer.clip_and_accumulate``;
* ``opacus_ghost``: opacus ``GradSampleModuleFastGradientClipping`` with ghost clipping (two backward passes).

Opacus sees a plain ``forward(x)``: :class:`OpacusMAE` packs the mask noise
into the input tensor, and turns the MAE's batch-broadcast tokens into
per-example outputs of a small module with its own grad sampler (opacus has
none for bare ``nn.Parameter``\\ s), through the same ``functional_call``
substitution the ghost path uses. Every method's clipped sum is checked
against vmap's (``rel err`` column).

Peak memory: ``VmHWM - VmRSS`` of a child process around one step after a
warm-up (the high-water mark reset through ``/proc/self/clear_refs``), with
glibc's mmap threshold fixed at 64 KiB so freed tensors leave the RSS.

    python benchmarks/bench_mae.py [--size vip_toy] [--batch 32] [--repeats 9] [--threads 1]

``--profile`` times the parts of a non-private and of a ghost step instead (:func:`profile_steps`: forward,
backward, the per-layer backward hooks, Gram matrices, book-keeping sums, the rest; CUDA events on a GPU, with
the host time beside them) and, with ``--kernels``, adds torch.profiler's top operators:

    python benchmarks/bench_mae.py --profile --kernels --size base --batch 64 --repeats 5 --device cuda --amp bf16
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

import torch
from torch import nn
from torch.func import functional_call

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from _results import write_section  # noqa: E402  (benchmarks/ is sys.path[0] when run as a script)
from backbones.mae.model import build_mae  # noqa: E402
from backbones.mae.per_example import clip_and_sum, clipped_grad_sum, per_example_grads, split_params  # noqa: E402

CLIP = 0.1
METHODS = ("nonprivate", "ghost", "ghost_bf16_norms", "ghost_tf32_sums", "vmap", "loop", "opacus", "opacus_ghost")


class _Token(nn.Module):
    """A (1, ..., D) token broadcast over the batch, as a module opacus can hook: forward(x) -> (B, ..., D)."""

    def __init__(self, value: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(value.detach().clone())

    def forward(self, x):
        return self.weight.expand(x.shape[0], *self.weight.shape[1:])


class OpacusMAE(nn.Module):
    """The MAE behind ``forward(x)``: x = [flattened image | mask noise] per row; returns per-example losses."""

    def __init__(self, mae):
        super().__init__()
        self.mae = mae
        self.tokens = nn.ModuleDict()
        for name, p in list(mae.named_parameters(recurse=False)):
            if p.requires_grad:
                self.tokens[name] = _Token(p)
                p.requires_grad_(False)  # trained through self.tokens[name]
        cfg = mae.cfg
        self.shape = (cfg.in_chans, cfg.img_size, cfg.img_size)
        self.n_pixels = cfg.in_chans * cfg.img_size ** 2

    @staticmethod
    def pack(imgs, noise):
        return torch.cat([imgs.flatten(1), noise], dim=1)

    def forward(self, x):
        imgs = x[:, :self.n_pixels].reshape(x.shape[0], *self.shape)
        noise = x[:, self.n_pixels:]
        per_example = {name: tok(x) for name, tok in self.tokens.items()}
        return functional_call(self.mae, per_example, (imgs, noise), strict=False)

    def named_grads(self, grads_of):
        """Map our parameters' results back to the MAE's parameter names."""
        out = {}
        for name, p in self.named_parameters():
            if p.requires_grad:
                key = name.split(".", 1)[1] if name.startswith("mae.") else name.split(".")[1]
                out[key] = grads_of(p)
        return out


def _register_token_sampler():
    from opacus.grad_sample import register_grad_sampler

    @register_grad_sampler(_Token)
    def _token_grad_sample(layer, activations, backprops):
        return {layer.weight: backprops}


def _build(size, depth=None, decoder_depth=None):
    over = {k: v for k, v in (("depth", depth), ("decoder_depth", decoder_depth)) if v is not None}
    return build_mae(size, **over)


def make_method(name, size, depth=None, decoder_depth=None, device="cpu", amp=None):
    """(step, model, reset) for ``name``: ``step(x, noise)`` returns the clipped sum as {param name: tensor};
    ``reset()`` frees what a step leaves behind (gradients, opacus' grad samples) before a memory measurement.
    ``amp``: autocast dtype of the forward passes (bf16 on a GPU, as DP-MAE trains with ``--amp bf16``)."""
    torch.manual_seed(0)
    model = _build(size, depth, decoder_depth).to(device)

    def reset():
        model.zero_grad(set_to_none=True)
    if name == "nonprivate":
        def step(x, noise):
            model.zero_grad(set_to_none=True)
            with torch.autocast(x.device.type, dtype=amp, enabled=amp is not None):
                losses = model(x, noise)
            losses.float().sum().backward()
            return {k: p.grad for k, p in model.named_parameters() if p.requires_grad}
    elif name in ("ghost", "vmap"):
        def step(x, noise):
            return clipped_grad_sum(model, x, noise, CLIP, method=name, autocast_dtype=amp)[0]
    elif name in ("ghost_bf16_norms", "ghost_tf32_sums"):
        from backbones.mae.ghost import ghost_clip_and_sum

        option = {"ghost_bf16_norms": "low_precision_norms", "ghost_tf32_sums": "tf32_sums"}[name]

        def step(x, noise):
            return ghost_clip_and_sum(model, x, noise, CLIP, autocast_dtype=amp, **{option: True})[0]
    elif name == "loop":
        def step(x, noise):
            grads = {k: [] for k, p in model.named_parameters() if p.requires_grad}
            for i in range(x.shape[0]):
                model.zero_grad(set_to_none=True)
                model(x[i:i + 1], noise[i:i + 1]).sum().backward()
                for k, p in model.named_parameters():
                    if p.requires_grad:
                        grads[k].append(p.grad)
            return clip_and_sum({k: torch.stack(v) for k, v in grads.items()}, CLIP)[0]
    elif name == "opacus":
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        _register_token_sampler()
        wrapped = OpacusMAE(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gsm = GradSampleModule(wrapped, loss_reduction="sum")
            opt = DPOptimizer(torch.optim.SGD([p for p in gsm.parameters() if p.requires_grad], lr=0.0),
                              noise_multiplier=0.0, max_grad_norm=CLIP, expected_batch_size=1, loss_reduction="sum")

        def step(x, noise):
            opt.zero_grad(set_to_none=True)
            with torch.autocast(x.device.type, dtype=amp, enabled=amp is not None):
                losses = gsm(OpacusMAE.pack(x, noise))
            losses.float().sum().backward()
            opt.clip_and_accumulate()  # opacus' own per-sample clipping and sum, into p.summed_grad
            out = wrapped.named_grads(lambda p: p.summed_grad)
            for p in gsm.parameters():
                p.summed_grad = None
            return out

        def reset():
            opt.zero_grad(set_to_none=True)  # grad_sample and summed_grad too
    elif name == "opacus_ghost":
        from opacus.grad_sample import GradSampleModuleFastGradientClipping

        _register_token_sampler()
        wrapped = OpacusMAE(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gsm = GradSampleModuleFastGradientClipping(wrapped, loss_reduction="sum", max_grad_norm=CLIP,
                                                       use_ghost_clipping=True)

        def step(x, noise):  # what opacus' DPTensorFastGradientClipping.backward does, without an optimizer
            gsm.zero_grad(set_to_none=True)
            with torch.autocast(x.device.type, dtype=amp, enabled=amp is not None):
                losses = gsm(OpacusMAE.pack(x, noise)).float()
            losses.sum().backward(retain_graph=True)
            coeff = gsm.get_clipping_coef()
            gsm.zero_grad(set_to_none=True)
            gsm.disable_hooks()
            (coeff * losses).sum().backward()
            gsm.enable_hooks()
            return wrapped.named_grads(lambda p: p.grad)
    else:
        raise ValueError(name)
    return step, model, reset


def _inputs(model, batch, device="cpu"):
    g = torch.Generator().manual_seed(1)
    cfg = model.cfg
    return (torch.randn(batch, 3, cfg.img_size, cfg.img_size, generator=g).to(device),
            torch.rand(batch, cfg.num_patches, generator=g).to(device))


def _cuda_peak(fn, x, noise) -> int:
    """Peak extra GPU memory (bytes) of one call of ``fn`` after a warm-up call (CUDA's allocator statistics)."""
    out = fn(x, noise)
    del out
    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(x, noise)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def _status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def measure_memory(name, size, batch, depth=None, decoder_depth=None, amp=None):
    """Peak extra resident memory (bytes) of one step of ``name``, in this (fresh) process (``amp``: as timed)."""
    step, model, reset = make_method(name, size, depth, decoder_depth, amp=amp)
    x, noise = _inputs(model, batch)
    out = step(x, noise)  # warm-up: lazy initializations, kernels, opacus preparation
    del out
    reset()
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    base = _status("VmRSS")
    out = step(x, noise)
    return _status("VmHWM") - base


class _Regions:
    """Time named regions of a step: CUDA events (GPU time between the two marks) on a GPU, and host time.

    Regions may nest (a layer's backward hook runs inside the backward); each is reported on its own. The host
    time of a region close to its GPU time means the region is bound by Python and kernel launches.
    """

    def __init__(self, cuda: bool):
        self.cuda, self.marks, self.open = cuda, [], []

    @contextlib.contextmanager
    def region(self, name):
        start = torch.cuda.Event(enable_timing=True) if self.cuda else None
        if start is not None:
            start.record()
        t = time.perf_counter()
        self.open.append(name)
        try:
            yield
        finally:
            self.open.pop()
            end = torch.cuda.Event(enable_timing=True) if self.cuda else None
            if end is not None:
                end.record()
            self.marks.append((name, start, end, time.perf_counter() - t))

    def wrap(self, owner, attr, name):
        """Patch ``owner.attr`` (a function or method) to run inside ``region(name(*args))``; returns an undo."""
        real = getattr(owner, attr)

        def timed(*args, **kwargs):
            with self.region(name(*args) if callable(name) else name):
                return real(*args, **kwargs)
        setattr(owner, attr, timed)
        return lambda: setattr(owner, attr, real)

    def collect(self) -> dict:
        """{region: (device ms, host ms)} summed over this step's marks; clears them."""
        if self.cuda:
            torch.cuda.synchronize()
        out = {}
        for name, start, end, host in self.marks:
            dev = start.elapsed_time(end) if self.cuda else 1e3 * host
            d, h = out.get(name, (0.0, 0.0))
            out[name] = (d + dev, h + 1e3 * host)
        self.marks = []
        return out


_FORWARD, _BACKWARD = "forward (with the recording hooks)", "backward (output grads, hooks inside)"
_HOOKS = "backward hooks: "
_GRAMS, _SUMS = "norms: Gram matrices of ghost layers", "clipped sums: book-keeping GEMMs"
_REST = "rest (small per-example norms and sums, clip factors, patch-embedding hook)"
_ORDER = ("forward", _FORWARD, "backward (weight grads included)", _BACKWARD, "backward without the hooks", _HOOKS,
          _GRAMS, _SUMS, _REST, "step")


def profile_steps(size, batch, depth, decoder_depth, device, amp, repeats, methods):
    """Median time of each part of a non-private and of a ghost step: {method: {part: (device ms, host ms)}}.

    Non-private: forward, backward. Ghost (``backbones.mae.ghost``): forward (with its hooks), backward (the
    output grads, with the per-layer hooks inside it, reported apart), then the norms (Gram matrices of ghost
    layers, the rest) and the clipped sums (book-keeping GEMMs, the rest), each timed where it runs.
    """
    from backbones.mae import ghost

    cuda = device.type == "cuda"
    out = {}
    for name in methods:
        torch.manual_seed(0)
        model = _build(size, depth, decoder_depth).to(device)
        x, noise = _inputs(model, batch, device)
        reg = _Regions(cuda)
        undo = []
        if name == "nonprivate":
            def step():
                model.zero_grad(set_to_none=True)
                with reg.region("step"):
                    with reg.region("forward"), torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                        losses = model(x, noise)
                    with reg.region("backward (weight grads included)"):
                        losses.float().sum().backward()
        else:
            option = {"ghost_bf16_norms": {"low_precision_norms": True}, "ghost_tf32_sums": {"tf32_sums": True}}.get(
                name, {})

            def kind(layer, *_):  # hooks inside the backward, by layer kind; the one after it counts as "rest"
                if _BACKWARD not in reg.open:
                    return "hook after the backward"
                if isinstance(layer.module, nn.LayerNorm):
                    return _HOOKS + "LayerNorm per-example grads"
                return _HOOKS + f"linear, {layer.plan} plan ({'keep a, g' if layer.plan == 'ghost' else 'bmm'})"
            undo.append(reg.wrap(ghost, "functional_call", _FORWARD))
            undo.append(reg.wrap(torch.autograd, "grad", _BACKWARD))
            undo.append(reg.wrap(ghost._Layer, "process", kind))
            undo.append(reg.wrap(ghost._Layer, "ghost_sq_norms", _GRAMS))
            undo.append(reg.wrap(ghost._Layer, "ghost_weight_sum", _SUMS))

            def step():
                with reg.region("step"):
                    ghost.ghost_clip_and_sum(model, x, noise, CLIP, autocast_dtype=amp, **option)
        try:
            step()  # warm-up
            reg.collect()
            runs = []
            for _ in range(repeats):
                step()
                runs.append(reg.collect())
        finally:
            for u in reversed(undo):
                u()
        if name != "nonprivate":  # derived parts, per run: the backward without its hooks, what is left of the step
            for r in runs:
                hooks = [k for k in r if k.startswith(_HOOKS)]
                r["backward without the hooks"] = tuple(r[_BACKWARD][i] - sum(r[k][i] for k in hooks) for i in (0, 1))
                r[_REST] = tuple(r["step"][i] - sum(r[k][i] for k in (_FORWARD, _BACKWARD, _GRAMS, _SUMS) if k in r)
                                 for i in (0, 1))
                r.pop("hook after the backward", None)  # inside the rest
        parts = {k: tuple(statistics.median(r[k][i] for r in runs) for i in (0, 1)) for k in runs[0]}
        rank = {k: next(j for j, o in enumerate(_ORDER) if k.startswith(o)) for k in parts}
        parts = dict(sorted(parts.items(), key=lambda kv: rank[kv[0]]))
        out[name] = parts
    return out


def kernel_table(size, batch, depth, decoder_depth, device, amp, methods, rows=15) -> str:
    """torch.profiler's top operators by self time (device time on a GPU) over 3 steps of each method."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    text = []
    for name in methods:
        fn = make_method(name, size, depth, decoder_depth, device, amp)[0]
        x, noise = _inputs(_build(size, depth, decoder_depth), batch, device)
        fn(x, noise)
        if cuda:
            torch.cuda.synchronize()
        with profile(activities=acts) as prof:
            for _ in range(3):
                fn(x, noise)
            if cuda:
                torch.cuda.synchronize()
        sort = "self_cpu_time_total"
        if cuda:
            sort = "self_device_time_total"
        try:
            table = prof.key_averages().table(sort_by=sort, row_limit=rows, max_name_column_width=60)
        except (AttributeError, KeyError, ValueError):
            table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=rows)
        text.append(f"{name} (3 steps):\n{table}")
    return "\n".join(text)


def profile_main(args, dev, amp, label, cfg):
    """``--profile``: where the private step's extra time goes (parts table + top operators), one section."""
    methods = ([m for m in args.methods if m in ("nonprivate", "ghost", "ghost_bf16_norms", "ghost_tf32_sums")]
               or ["nonprivate", "ghost"])
    if "nonprivate" not in methods:
        methods.insert(0, "nonprivate")
    parts = profile_steps(args.size, args.batch, args.depth, args.decoder_depth, dev, amp, args.repeats, methods)
    cuda = dev.type == "cuda"
    unit = "GPU ms (CUDA events)" if cuda else "ms"
    base = parts["nonprivate"]["step"][0]
    lines = [f"| method | part | {unit} (median of {args.repeats}) | host ms | share of the step | vs non-private step |",
             "|---|---|---|---|---|---|"]
    for name, p in parts.items():
        step = p["step"][0]
        for k, (d, h) in p.items():
            lines.append(f"| {name} | {'**whole step**' if k == 'step' else k} | {d:.2f} | {h:.2f} | "
                         f"{d / step:.0%} | {d / base:.2f}x |")
    machine = (f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}, autocast {args.amp}" if cuda else
               f"{os.cpu_count()}-core CPU ({platform.machine()}), shared, torch {torch.__version__}, "
               f"{args.threads} thread(s), autocast {args.amp}")
    text = "\n".join(lines) + (
        f"\n\nMachine: {machine}. Clip C={CLIP}. Parts nest: the backward hooks run inside the backward (reported "
        "apart, and the backward without them); norms and sums after it. A host time close to the device time "
        "marks a part bound by Python and kernel launches.\n")
    if args.kernels:
        text += "\nTop operators by self time:\n\n```\n" + kernel_table(
            args.size, args.batch, args.depth, args.decoder_depth, dev, amp, methods) + "\n```\n"
    print(text)
    write_section(args.out, f"bench_mae profile {args.size} depth={cfg.depth}+{cfg.decoder_depth} batch={args.batch}"
                  f" {args.device} {args.amp}",
                  f"### DP-MAE step profile, {label}, batch {args.batch} (benchmarks/bench_mae.py --profile)\n\n"
                  + text)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="vip_toy")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--depth", type=int, default=None, help="override the encoder depth (e.g. 2 for a ViT-B slice)")
    ap.add_argument("--decoder-depth", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--amp", default="none", choices=["none", "bf16"], help="autocast of the forward passes")
    ap.add_argument("--profile", action="store_true",
                    help="time the parts of a non-private and a ghost step instead (forward, backward, per-layer "
                         "hooks, Gram matrices, book-keeping sums)")
    ap.add_argument("--kernels", action="store_true", help="with --profile: add torch.profiler's top operators")
    ap.add_argument("--measure-memory", default=None, help=argparse.SUPPRESS)  # child process mode
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "mae.md"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.measure_memory:
        print(json.dumps({"peak": measure_memory(args.measure_memory, args.size, args.batch, args.depth,
                                                 args.decoder_depth,
                                                 torch.bfloat16 if args.amp == "bf16" else None)}))
        return

    dev, amp = torch.device(args.device), (torch.bfloat16 if args.amp == "bf16" else None)
    cuda = dev.type == "cuda"
    if args.profile:
        cfg = _build(args.size, args.depth, args.decoder_depth).cfg
        label = (f"{args.size} ({cfg.img_size}px/{cfg.patch_size}, {cfg.depth}x{cfg.embed_dim} enc, "
                 f"{cfg.decoder_depth}x{cfg.decoder_embed_dim} dec)")
        return profile_main(args, dev, amp, label, cfg)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    steps, errors = {}, {}
    for name in args.methods:
        try:
            steps[name] = make_method(name, args.size, args.depth, args.decoder_depth, dev, amp)[0]
        except Exception as exc:  # noqa: BLE001 - a method that cannot run is reported, not hidden
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    x, noise = _inputs(_build(args.size, args.depth, args.decoder_depth), args.batch, dev)
    # correctness first: every private method's clipped sum against vmap's (the reference: float32, a few rows
    # at a time; with bf16 autocast the rel err shows the autocast's rounding too)
    torch.manual_seed(0)
    m = _build(args.size, args.depth, args.decoder_depth).to(dev)
    tr, fr = split_params(m)
    ref = {}
    for part in range(0, args.batch, 8):
        got = clip_and_sum(per_example_grads(m, tr, fr, x[part:part + 8], noise[part:part + 8])[0], CLIP)[0]
        ref = {k: ref.get(k, 0) + v.float().cpu() for k, v in got.items()}
    cfg = m.cfg
    del m, tr, fr
    flat_ref = torch.cat([ref[k].flatten() for k in sorted(ref)])
    rel = {}
    for name, fn in list(steps.items()):
        try:
            out = fn(x, noise)
        except Exception as exc:  # noqa: BLE001
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            del steps[name]
            continue
        if name != "nonprivate":
            flat = torch.cat([out[k].float().cpu().flatten() for k in sorted(ref)])
            rel[name] = float((flat - flat_ref).norm() / flat_ref.norm())
    times = {k: [] for k in steps}
    for _ in range(args.repeats):  # interleaved, so load drift hits every method alike
        for name, fn in steps.items():
            sync()
            t = time.perf_counter()
            fn(x, noise)
            sync()
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONPATH=ROOT)
    peak = {name: _cuda_peak(fn, x, noise) for name, fn in steps.items()} if cuda else {}
    for name in steps if not cuda else ():
        depth = ["--depth", str(args.depth)] if args.depth else []
        depth += ["--decoder-depth", str(args.decoder_depth)] if args.decoder_depth else []
        r = subprocess.run([sys.executable, __file__, "--measure-memory", name, "--size", args.size, "--batch",
                            str(args.batch), "--threads", str(args.threads), "--amp", args.amp, *depth], env=env,
                           capture_output=True,
                           text=True)
        peak[name] = json.loads(r.stdout.strip().splitlines()[-1])["peak"] if r.returncode == 0 else None
    machine = (f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}, autocast {args.amp}" if cuda else
               f"{os.cpu_count()}-core CPU ({platform.machine()}), shared, torch {torch.__version__}, "
               f"{args.threads} thread(s), no GPU" + (f", autocast {args.amp}" if args.amp != "none" else ""))
    header = ("| model | physical batch | method | ms / batch (median of "
              f"{args.repeats}) | img/s | time vs non-private | peak extra MB | memory vs non-private | "
              "rel err vs vmap |\n|---|---|---|---|---|---|---|---|---|")
    label = (f"{args.size} ({cfg.img_size}px/{cfg.patch_size}, {cfg.depth}x{cfg.embed_dim} enc, "
             f"{cfg.decoder_depth}x{cfg.decoder_embed_dim} dec)")
    rows = []
    for name in steps:
        mem = (f"{peak[name] / 2**20:.1f} | {peak[name] / peak['nonprivate']:.2f}x" if peak.get(name) and
               peak.get("nonprivate") else "- | -")
        rows.append(f"| {label} | {args.batch} | {name} | {1e3 * med[name]:.0f} | {args.batch / med[name]:.0f} | "
                    f"{med[name] / med['nonprivate']:.2f}x | {mem} | "
                    f"{'-' if name == 'nonprivate' else f'{rel[name]:.1e}'} |")
    for name, err in errors.items():
        rows.append(f"| {label} | {args.batch} | {name} | - | - | not run: {err} | - | - | - |")
    text = header + "\n" + "\n".join(rows) + f"\n\nMachine: {machine}. Clip C={CLIP}.\n"
    print(text)
    write_section(args.out, f"bench_mae {args.size} depth={cfg.depth}+{cfg.decoder_depth} batch={args.batch}"
                  + (f" {args.device} {args.amp}" if cuda or args.amp != "none" else ""),
                  f"### DP-MAE {label}: per-example clipping vs a non-private batch (benchmarks/bench_mae.py)\n\n"
                  + text)


if __name__ == "__main__":
    main()
