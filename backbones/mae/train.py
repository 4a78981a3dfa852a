"""MAE training loop and CLI: non-private (synthetic warm start) and DP-AdamW (the ViP recipe).

::

    python -m backbones.mae.train --size vip_toy --data synthetic --steps 1500 --out runs/syn
    python -m backbones.mae.train --size vip_toy --data digits --dp --epsilon 8 \\
        --init runs/syn/checkpoint.pth --steps 100 --sample-rate 0.25 --out runs/dp

Every ``--ckpt-every`` steps (and at the end) ``<out>/checkpoint.pth`` is
rewritten atomically; ``--resume`` continues the run from it (same masks and
accountant; a non-private run also the same batches). A DP run's Poisson
sample and noise are keyed by secrets that no file holds, so a resumed DP run
draws fresh ones (bit for bit only when both ``--sample-seed`` and
``--noise-seed`` are given again, which labels the run seeded). A DP run
counts each step before it draws its noise in ``<out>/dp_steps.json``, so
the steps a stop loses after the last checkpoint are counted on resume.
An image folder is decoded in full before the first step. ``--export
PATH`` writes the encoder alone in the ViP release layout for the
``backbones`` registry, with its provenance (and, for DP, its dp-accounting
event: :func:`run_dp_event`) in ``<PATH stem>.json``.

DP mode (``--dp``) is DP-AdamW: each logical step Poisson-samples the private
set with rate q, clips each example's gradient to C in physical batches
(``--per-example ghost``, the default: per-example norms by mixed ghost
norms and the clipped sum by book-keeping, :mod:`backbones.mae.ghost`;
``vmap``: per-example gradients with ``torch.func``, the reference), sums,
adds N(0, sigma^2 C^2) once, divides by q*N and takes an AdamW step. sigma comes from ``privlin.accounting`` for the
target (epsilon, delta) over all ``--steps``. See :mod:`backbones.mae.dp` for
the full privacy statement.
"""
from __future__ import annotations

import argparse
import dataclasses
import os

import cliconv as cli

from .config import MAE_SIZES
from .errors import CheckpointWriteError, UnsupportedModuleError
from .settings import LIMITS, METHODS, SECRET_SETTINGS, TrainSettings

__all__ = ["TrainSettings", "train", "export_path", "lr_at", "main", "run_dp_event", "SECRET_SETTINGS"]

#: The trainer's public names, loaded with torch on first use (PEP 562) so the command line checks its arguments
#: first.
_TRAINER = ("train", "export_path", "lr_at", "run_dp_event")


def __getattr__(name: str):
    if name in _TRAINER:
        from . import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


PROG = "python -m backbones.mae.train"


def _parser() -> argparse.ArgumentParser:
    d = TrainSettings()
    p = cli.parser(PROG, __doc__)  # the project's convention (cliconv): defaults shown, one-line errors
    a = p.add_argument
    a("--size", default=d.size, choices=sorted(MAE_SIZES), help="MAE size (encoder x decoder)")
    a("--data", default=d.data, help="synthetic (public) | digits | imagefolder:PATH (private)")
    a("--steps", type=LIMITS["steps"], default=d.steps, help="logical optimizer steps")
    a("--batch-size", type=LIMITS["batch_size"], default=d.batch_size,
      help="images per step; with --dp the expected logical batch q*N")
    a("--sample-rate", type=LIMITS["sample_rate"], default=None, help="DP Poisson rate q (overrides --batch-size)")
    a("--physical-batch", type=LIMITS["physical_batch"], default=d.physical_batch,
      help="images per forward/backward pass")
    a("--lr", type=LIMITS["lr"], default=d.lr, help="peak learning rate")
    a("--min-lr", type=LIMITS["min_lr"], default=d.min_lr, help="learning rate at the end of the cosine")
    a("--warmup-steps", type=LIMITS["warmup_steps"], default=d.warmup_steps, help="linear warmup steps")
    a("--weight-decay", type=LIMITS["weight_decay"], default=d.weight_decay,
      help="AdamW weight decay (ViP DP: 0.005)")
    a("--seed", type=LIMITS["seed"], default=d.seed,
      help="public seed of the initialization and the masks (never the DP sample)")
    a("--noise-seed", type=LIMITS["noise_seed"], default=None,
      help="seed of the DP noise (default: 256 bits of os.urandom); a seeded run is labelled so")
    a("--sample-seed", type=LIMITS["sample_seed"], default=None,
      help="seed of the DP Poisson sample (default: 256 bits of os.urandom, broadcast from rank 0)")
    a("--dp", action="store_true", help="train with DP-AdamW")
    a("--epsilon", type=LIMITS["epsilon"], default=d.epsilon, help="target epsilon (with --dp)")
    a("--delta", type=LIMITS["delta"], default=None, help="target delta (default: min(1e-5, 1/(10N)))")
    a("--clip", type=LIMITS["clip"], default=d.clip, help="per-example gradient norm bound C")
    a("--noise-multiplier", type=LIMITS["noise_multiplier"], default=None,
      help="sigma (default: calibrated to --epsilon)")
    a("--accountant", default=d.accountant, choices=["pld", "rdp"], help="privlin.accounting accountant")
    a("--per-example", default=d.per_example, choices=list(METHODS),
      help="DP clipping: ghost (mixed ghost norms + book-keeping) or vmap (per-example gradients, reference)")
    a("--device", default=d.device, choices=["auto", "cpu", "cuda"], help="auto: CUDA when available")
    a("--amp", default=d.amp, choices=["none", "bf16"], help="bf16 autocast of the forward passes")
    a("--init", default=None, help="ViP-layout .pth to start from (a MAE checkpoint or an exported encoder)")
    a("--out", default=d.out, help="run directory (checkpoint.pth inside; a DP run's step journal dp_steps.json too)")
    a("--ckpt-every", type=LIMITS["ckpt_every"], default=d.ckpt_every, help="steps between checkpoints")
    a("--log-every", type=LIMITS["log_every"], default=d.log_every, help="steps between log lines")
    a("--export", default=None, help="write the encoder (float16, ViP layout) and its provenance JSON here at the end "
                                     "(a bare file name goes under --out)")
    a("--resume", action="store_true", help="continue from <out>/checkpoint.pth (same settings required)")
    a("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    a("--no-progress", action="store_true", help="no progress bar")
    a("--show-loss", action="store_true",
      help="with --dp, also show the training loss (computed on private images without noise: NOT differentially "
           "private; warns). By default a DP run shows step, epsilon spent and img/s only")
    return p


#: User errors: reported as one line on stderr with exit status 2, never as a traceback.
_USER_ERRORS = (ValueError, KeyError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
                PermissionError, UnsupportedModuleError, CheckpointWriteError, FloatingPointError)


@cli.entry_point(PROG, _USER_ERRORS)
def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    fields = {f.name for f in dataclasses.fields(TrainSettings)}
    s = TrainSettings(**{k: v for k, v in vars(args).items() if k in fields})  # checks every setting first
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    if args.resume and not os.path.isfile(os.path.join(s.out, "checkpoint.pth")):
        raise FileNotFoundError(f"--resume: no checkpoint at {os.path.join(s.out, 'checkpoint.pth')}")
    from .trainer import train_command  # torch loads only now, once every argument is checked

    result = train_command(s, resume=args.resume, progress=not args.no_progress, show_loss=args.show_loss,
                           threads=args.threads)
    if result is None:  # not rank 0
        return 0
    line = f"step {result['step']}" + (f"  loss {result['loss']:.4f}" if result["loss"] is not None else "")
    line += f"  checkpoint {result['checkpoint']}"
    if s.dp:
        line += (f"  (epsilon={result['epsilon']:.3f}, delta={result['delta']:.2e}, sigma="
                 f"{result['noise_multiplier']:.3f}, q={result['sample_rate']:.4f}, {result['accountant']}, "
                 f"{result['neighboring_relation']}{', SEEDED' if any(result['seeded'].values()) else ''}"
                 + (f", {result['dp_steps']} noisy steps counted: {result['steps_redone']} lost at stops and redone"
                    if result["steps_redone"] else "") + ")")
        if result["changed_files_read"]:
            line += ("  NOTE: training files that differed from the pre-flight were read during training and "
                     "counted as null images (they contributed nothing)")
    if result.get("export"):
        line += f"  export {result['export']}"
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

