"""The settings of a DP-MAE run and their checks, free of torch: a wrong size, data spec or method is named before
the trainer's heavy imports (the command line, :mod:`backbones.mae.train`, checks them first)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real

import cliconv as cli

from .config import MAE_SIZES

__all__ = ["TrainSettings", "LIMITS", "METHODS", "SECRET_SETTINGS", "check_data_spec", "MAX_STEPS", "MAX_BATCH",
           "MAX_LR", "MAX_UPDATE_STD"]

#: Ways to compute a clipped per-example gradient sum: the fast path and the reference.
METHODS = ("ghost", "vmap")


def check_data_spec(spec: str) -> None:
    """Refuse a data spec that is none of ``synthetic``, ``digits``, ``imagefolder:PATH`` (reads nothing).

    Checked with the other settings, so a typo is named before any image is read or any model is built.
    """
    kind, _, path = spec.partition(":")
    if spec not in ("synthetic", "digits") and not (kind == "imagefolder" and path):
        raise ValueError(f"unknown data spec {spec!r}; use synthetic, digits or imagefolder:PATH")


@dataclass
class TrainSettings:
    """Settings of one MAE training run (stored in its checkpoints).

    Parameters
    ----------
    size : str
        A key of ``MAE_SIZES`` ("toy", "vip_toy", "nano" ... "large").
    data : str
        ``synthetic`` (public), ``digits`` or ``imagefolder:PATH`` (private).
    steps : int
        Total (logical) optimizer steps of the run.
    batch_size : int
        Non-private: images per step. DP: expected logical batch q*N, used
        when ``sample_rate`` is None.
    sample_rate : float or None
        DP Poisson sampling rate q.
    physical_batch : int
        Images per forward/backward pass; logical batches are accumulated.
    lr, min_lr, warmup_steps : float, float, int
        Linear warmup to ``lr`` then cosine decay to ``min_lr``.
    weight_decay, beta1, beta2 : float
        AdamW (ViP: wd 0.005 for DP, betas 0.9/0.95); no decay on biases,
        norms and tokens.
    seed : int
        Public seed of the initialization, the masks and (non-private runs
        only) the batches. It never seeds anything secret.
    noise_seed, sample_seed : int or None
        DP only. Seeds of the Gaussian noise and of the Poisson sample; None
        (default) keys each from 256 bits of ``os.urandom``
        (:class:`backbones.mae.dp.SecretStream`). A seeded run is labelled so
        in its checkpoint and export; the seeds themselves are never written.
    dp : bool
        Train with DP-AdamW.
    epsilon, delta : float, float or None
        Target privacy; ``delta`` None means ``min(1e-5, 1/(10 N))``
        (delta >= 1/N warns: such a guarantee is void).
    clip : float
        Per-example gradient norm bound C (ViP: 0.1).
    noise_multiplier : float or None
        sigma; None calibrates it with ``privlin.accounting``.
    accountant : {"pld", "rdp"}
    init : str or None
        ViP-layout weights to start from (full MAE or encoder only).
    out : str
        Run directory (``checkpoint.pth`` inside).
    ckpt_every, log_every : int
    export : str or None
        Where to write the released encoder (float16) at the end: a bare
        file name goes under ``out``, a path with a folder part is taken as
        given (:func:`export_path`).
    per_example : {"ghost", "vmap"}
        DP clipping: mixed ghost norms + book-keeping (fast, default) or
        ``vmap`` per-example gradients (the reference; any module).
    device : {"auto", "cpu", "cuda"}
        ``auto``: CUDA when available (``cuda:LOCAL_RANK`` under torchrun).
    amp : {"none", "bf16"}
        bf16 autocast of the forward passes; the ghost path's norms and
        clipped sums stay float32 (:mod:`backbones.mae.ghost`).
    """

    size: str = "vip_toy"
    data: str = "synthetic"
    steps: int = 1000
    batch_size: int = 64
    sample_rate: float | None = None
    physical_batch: int = 64
    lr: float = 1.5e-3
    min_lr: float = 0.0
    warmup_steps: int = 50
    weight_decay: float = 0.05
    beta1: float = 0.9
    beta2: float = 0.95
    seed: int = 0
    noise_seed: int | None = None
    sample_seed: int | None = None
    dp: bool = False
    epsilon: float = 8.0
    delta: float | None = None
    clip: float = 0.1
    noise_multiplier: float | None = None
    accountant: str = "pld"
    init: str | None = None
    out: str = "runs/mae"
    ckpt_every: int = 100
    log_every: int = 10
    export: str | None = None
    per_example: str = "ghost"
    device: str = "auto"
    amp: str = "none"

    def __post_init__(self):
        if self.size not in MAE_SIZES:
            raise ValueError(f"unknown size {self.size!r}; known: {sorted(MAE_SIZES)}")
        check_data_spec(self.data)
        for name, limit in LIMITS.items():  # types and ranges, before anything is read, charged or written
            value = getattr(self, name)
            if value is None and name in _OPTIONAL:
                continue
            if isinstance(value, bool) or not isinstance(value, Integral if limit.kind is int else Real):
                raise ValueError(f"{name} must be {'an integer' if limit.kind is int else 'a number'}, "
                                 f"got {value!r}")
            if not limit.contains(value):
                raise ValueError(f"{name} must be {limit}, got {value}")
        if self.dp and self.noise_multiplier is None and not self.epsilon < math.inf:
            raise ValueError(f"epsilon must be > 0 and finite with --dp (train without --dp for a non-private "
                             f"run), got {self.epsilon}")
        for name, allowed in (("per_example", METHODS), ("device", ("auto", "cpu", "cuda")),
                              ("amp", ("none", "bf16")), ("accountant", ("pld", "rdp"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {getattr(self, name)!r}")
        if not self.min_lr <= self.lr:
            raise ValueError(f"need 0 <= min_lr <= lr, got min_lr={self.min_lr}, lr={self.lr}")
        if self.lr * self.weight_decay > 1:  # AdamW multiplies the weights by 1 - lr*wd each step
            raise ValueError(f"lr * weight_decay must be <= 1 (AdamW scales the weights by 1 - lr*wd every step), "
                             f"got {self.lr:g} * {self.weight_decay:g}")


#: Most logical steps, images per step and peak learning rate a run may ask for: public bounds, far beyond any
#: DP-MAE run (ViP: ~10^4-10^5 steps at lr ~0.06), that keep AdamW's float32 arithmetic finite (its step size
#: lr / (1 - beta1) overflowed float32 from lr ~3e37: a torch traceback) and memory bounded.
MAX_STEPS, MAX_BATCH, MAX_LR = 10**7, 10**6, 10.0
#: Largest standard deviation of a DP step's noisy mean gradient, sigma*C/(q*N): AdamW squares it in float32
#: (max 3.4e38); beyond it the first noisy update overflows and stops the run after the step was taken.
MAX_UPDATE_STD = 1e15
#: The limit of every numeric setting (one table: the command line's types and ``TrainSettings`` read it).
LIMITS = {
    "steps": cli.Interval(int, 1, MAX_STEPS),
    "batch_size": cli.Interval(int, 1, MAX_BATCH),
    "physical_batch": cli.Interval(int, 1, MAX_BATCH),
    "sample_rate": cli.Interval(float, 0, 1, closed="right"),
    "lr": cli.Interval(float, 0, MAX_LR, closed="right"),
    "min_lr": cli.Interval(float, 0, MAX_LR),
    "warmup_steps": cli.Interval(int, 0, MAX_STEPS),
    "weight_decay": cli.Interval(float, 0, math.inf, closed="left"),
    "beta1": cli.Interval(float, 0, 1, closed="left"),
    "beta2": cli.Interval(float, 0, 1, closed="left"),
    "seed": cli.Interval(int, 0, 2**63 - 2),  # torch.manual_seed takes seed + 1 < 2**63
    "noise_seed": cli.Interval(int, 0, None),
    "sample_seed": cli.Interval(int, 0, None),
    "epsilon": cli.Interval(float, 0, None, closed="neither"),  # inf: refused with --dp below, with its reason
    "delta": cli.Interval(float, 0, 1, closed="neither"),
    "clip": cli.Interval(float, 0, math.inf, closed="neither"),
    "noise_multiplier": cli.Interval(float, 0, math.inf, closed="neither"),
    "ckpt_every": cli.Interval(int, 1, None),
    "log_every": cli.Interval(int, 1, None),
}
_OPTIONAL = ("sample_rate", "noise_seed", "sample_seed", "delta", "noise_multiplier")


#: Settings that are secrets (or make one reproducible): never written to a checkpoint or a provenance file.
SECRET_SETTINGS = ("noise_seed", "sample_seed")
