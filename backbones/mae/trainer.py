"""The MAE training loop behind ``python -m backbones.mae.train``: non-private (synthetic warm start) and DP-AdamW
(the ViP recipe). The command line, its settings and the full description of a run (checkpoints, resume, export,
DP mode) are in :mod:`backbones.mae.train`; :func:`train` takes checked :class:`~backbones.mae.settings.TrainSettings`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import time
import warnings

import numpy as np
import torch
from privlin.events import event_from_dict, event_to_dict  # the one event codec (a ledger reads it back)

from .checkpoint import (STEP_JOURNAL, export_encoder, load_checkpoint, load_mae_weights, read_step_journal,
                         remove_stale_temporaries, save_checkpoint, write_step_journal)
from .data import FolderImages, make_source, normalize
from .dp import (DPAccountantState, PrivacyLeakWarning, SecretStream, broadcast_stream, calibrate_sigma,
                 default_delta, poisson_sample, reduce_and_privatize)
from .ghost import check_supported
from .model import MAE_SIZES, MaskedAutoencoder, build_mae
from .per_example import clipped_grad_sum, split_params
from .settings import MAX_UPDATE_STD, SECRET_SETTINGS, TrainSettings

__all__ = ["train", "train_command", "export_path", "lr_at", "run_dp_event"]


#: Settings a resumed run must share with its checkpoint: the run and its privacy accounting.
_RESUME_SAME = ("size", "data", "dp", "seed", "clip", "steps", "physical_batch", "batch_size", "sample_rate",
                "epsilon", "delta", "noise_multiplier", "accountant")


#: spawn_key tag of a DP run's per-step mask generators (public: keyed by --seed and the step index).
_MASK_STREAM = 1


def _public_settings(s: TrainSettings) -> dict:
    """The settings as stored in checkpoints and provenance: everything but :data:`SECRET_SETTINGS`."""
    return {k: v for k, v in dataclasses.asdict(s).items() if k not in SECRET_SETTINGS}


def export_path(s: TrainSettings) -> str | None:
    """Where ``--export`` writes: a bare file name goes under ``--out`` (beside the run's checkpoint); a path with a
    folder part (absolute, or relative to the working directory) is taken as given."""
    if s.export is None:
        return None
    return s.export if os.path.dirname(s.export) else os.path.join(s.out, s.export)


def lr_at(step: int, s: TrainSettings) -> float:
    """Learning rate of step ``step`` (0-based): linear warmup, then half-cosine to ``min_lr``."""
    if step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    frac = (step - s.warmup_steps) / max(1, s.steps - s.warmup_steps)
    return s.min_lr + (s.lr - s.min_lr) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac)))


def _param_groups(model: torch.nn.Module, weight_decay: float):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim <= 1 or name in ("cls_token", "mask_token") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _device(s: TrainSettings) -> torch.device:
    if s.device == "cpu" or (s.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError("--device cuda, but no CUDA device is visible")
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(dev)
    return dev


def _dist_info():
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _Run:
    """The mutable state of a run: model, optimizer, generators, accountant, history."""

    def __init__(self, s: TrainSettings, source, n_private: int | None):
        self.s = s
        self.source = source
        with torch.random.fork_rng(devices=[]):  # the initialization is part of the seeded run
            torch.manual_seed(s.seed)
            self.model: MaskedAutoencoder = build_mae(s.size)
        self.init_missing = load_mae_weights(self.model, s.init) if s.init else []
        if s.dp and s.per_example == "ghost":
            check_supported(self.model)  # refused before any private image is read
        self.device = _device(s)
        self.model.to(self.device)
        self.amp = torch.bfloat16 if s.amp == "bf16" else None
        self.optimizer = torch.optim.AdamW(_param_groups(self.model, s.weight_decay), lr=s.lr,
                                           betas=(s.beta1, s.beta2), eps=1e-8)
        # public generators (from --seed) of a non-private run, saved in its checkpoints so that it resumes with
        # the same masks and batches; a DP run has none (see _mask_noise)
        self.gens = {} if s.dp else {"mask": torch.Generator().manual_seed(s.seed + 1),
                                     "data": torch.Generator().manual_seed(s.seed)}
        self.sampler = self.noise = None  # secret streams (DP): never saved
        self.seeded = {"sample": False, "noise": False}
        self.step = 0
        self.history: list[list[float]] = []  # [step, mean loss, epsilon]; saved for a non-private run only
        self.accountant: DPAccountantState | None = None
        self.journal = os.path.join(s.out, STEP_JOURNAL)  # a DP run's count of noisy steps begun (write-ahead)
        self.redone = 0  # noisy steps lost at the last stop (taken after the checkpoint resumed from)
        self.changed_read = False  # a training file read during the run differed from the pre-flight (DP)
        self.ledger_run: str | None = None  # the run's id in the ledger home (public), kept in its checkpoints
        if s.dp:
            n = n_private
            q = s.sample_rate if s.sample_rate is not None else min(1.0, s.batch_size / n)
            delta = s.delta if s.delta is not None else default_delta(n)
            if s.delta is not None:
                from privlin.report import setting_leaks  # privlin's delta >= 1/N warning

                setting_leaks(private=True, delta=delta, n=n)
            sigma = s.noise_multiplier
            if sigma is None:
                sigma = calibrate_sigma(s.epsilon, delta, s.steps, q, s.accountant)
            update_std = sigma * s.clip / (q * n)  # public: sigma, C, q and N
            if not update_std <= MAX_UPDATE_STD:
                raise ValueError(f"the noise of each step's mean gradient, sigma*C/(q*N) = {sigma:.3g}*{s.clip:g}/"
                                 f"({q:.3g}*{n}) = {update_std:.3g}, is more than AdamW's float32 arithmetic holds "
                                 f"(MAX_UPDATE_STD = {MAX_UPDATE_STD:g}): raise --epsilon or --sample-rate, or "
                                 f"lower --clip or --noise-multiplier")
            self.accountant = DPAccountantState(noise_multiplier=float(sigma), sample_rate=float(q),
                                                delta=float(delta),
                                                target_epsilon=s.epsilon if s.noise_multiplier is None else None,
                                                accountant=s.accountant)
            rank, _ = _dist_info()
            # the sample key is drawn on rank 0 and broadcast; the noise key never leaves rank 0
            self.sampler = broadcast_stream(SecretStream(s.sample_seed) if rank == 0 else None)
            self.noise = SecretStream(s.noise_seed) if rank == 0 else None
            self.seeded = {"sample": self.sampler.seeded, "noise": s.noise_seed is not None}
            for what, flag in (("sample", "--sample-seed"), ("noise", "--noise-seed")):
                if self.seeded[what] and rank == 0:
                    warnings.warn(f"{flag} makes the DP {what} reproducible: the guarantee does not hold against "
                                  f"anyone who knows the seed (the run is labelled seeded)", PrivacyLeakWarning,
                                  stacklevel=3)

    # -- checkpoints -------------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write the checkpoint. A DP run's holds nothing computed from private images but the weights and the
        optimizer state: no loss history (its losses are noise-free means over the Poisson samples) and no
        generator state (a mask stream carried across steps would encode every sample's size). A DP run's step
        journal is rewritten first (it then carries the latest ``changed_files_read``)."""
        if self.s.dp:
            write_step_journal(self.journal, self.accountant.steps, self.changed_read)
        save_checkpoint(path, model=self.model, optimizer=self.optimizer, step=self.step,
                        rng={k: g.get_state() for k, g in self.gens.items()},  # public, non-private runs only
                        accountant=self.accountant.to_dict() if self.accountant else None,
                        config={"settings": _public_settings(self.s), "seeded": dict(self.seeded),
                                "mae": dataclasses.asdict(self.model.cfg), "ledger_run": self.ledger_run},
                        history=None if self.s.dp else self.history)

    def restore(self, path: str) -> None:
        ck = load_checkpoint(path)
        saved = ck["config"]["settings"]
        for key in _RESUME_SAME:
            if saved.get(key) != getattr(self.s, key):
                raise ValueError(f"cannot resume {path}: --{key.replace('_', '-')} {getattr(self.s, key)} but the run "
                                 f"was started with {saved.get(key)} (a run's settings and privacy accounting cannot "
                                 f"change midway; pass the same values, or start a new --out)")
        self.model.load_state_dict(ck["model"], strict=True)
        self.optimizer.load_state_dict(ck["optimizer"])
        for k, state in ck["rng"].items():
            if self.s.dp:  # a DP checkpoint written before masks were keyed by step: the state is not needed
                continue
            if k not in self.gens:
                raise ValueError(f"cannot resume: the checkpoint holds an unexpected generator {k!r}")
            self.gens[k].set_state(state)
        # fresh secret keys (drawn in __init__): a resumed run draws fresh samples and fresh noise;
        # a run seeded in any of its parts stays labelled seeded
        for k, flag in ck["config"].get("seeded", {}).items():
            self.seeded[k] = bool(self.seeded.get(k)) or bool(flag)
        self.step = int(ck["step"])
        self.ledger_run = ck["config"].get("ledger_run")
        self.history = [list(h) for h in ck["history"] or []]
        if ck["accountant"] is not None:
            self.accountant = DPAccountantState(**ck["accountant"])
        if self.s.dp:  # every noisy step ever begun counts, also those taken after this checkpoint and lost
            journal = read_step_journal(self.journal)
            if journal["noisy_steps"] < self.accountant.steps:
                raise ValueError(f"{self.journal!r} is damaged: it counts {journal['noisy_steps']} noisy steps, "
                                 f"fewer than the {self.accountant.steps} of the checkpoint {path!r}")
            self.redone = journal["noisy_steps"] - self.accountant.steps
            self.accountant.steps = journal["noisy_steps"]
            self.changed_read = journal["changed_files_read"]

    def count_step(self) -> None:
        """Count a DP step as taken before it draws its sample and noise: the journal first (rank 0), then the
        accountant. A stop, an error or a kill after this leaves the step counted."""
        rank, _ = _dist_info()
        if rank == 0:
            write_step_journal(self.journal, self.accountant.steps + 1, self.changed_read)
        self.accountant.steps += 1

    # -- steps -------------------------------------------------------------------------------------
    def _mask_noise(self, b: int) -> torch.Tensor:
        """Mask noise of this step's ``b`` images (public randomness, from ``--seed``).

        Non-private runs draw it from one generator carried across steps (saved in checkpoints). A DP run
        draws step ``t``'s from a generator keyed by (seed, t) alone: how much of a carried stream earlier steps
        consumed would be a function of their (private) Poisson sample sizes. Resume stays exact either way.
        """
        if self.s.dp:
            key = np.random.SeedSequence(self.s.seed, spawn_key=(_MASK_STREAM, self.step)).generate_state(1, np.uint64)
            gen = torch.Generator().manual_seed(int(key[0]))
        else:
            gen = self.gens["mask"]
        return torch.rand(b, self.model.cfg.num_patches, generator=gen).to(self.device)

    def _images(self, idx: torch.Tensor) -> torch.Tensor:
        return normalize(self.source[idx.numpy()].to(self.device))

    def _set_lr(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(self.step, self.s)

    def nonprivate_step(self) -> float:
        s, n = self.s, len(self.source)
        if n > 2**40:  # infinite synthetic stream: fresh images every step
            idx = torch.arange(self.step * s.batch_size, (self.step + 1) * s.batch_size)
        else:
            idx = torch.randperm(n, generator=self.gens["data"])[: s.batch_size]
        noise = self._mask_noise(len(idx))
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for chunk, nz in zip(idx.split(s.physical_batch), noise.split(s.physical_batch)):
            with torch.autocast(self.device.type, dtype=self.amp, enabled=self.amp is not None):
                losses = self.model(self._images(chunk), nz)
            (losses.float().sum() / len(idx)).backward()
            total += float(losses.detach().sum())
        self._set_lr()
        self.optimizer.step()
        return total / len(idx)

    def dp_step(self) -> float:
        """One DP-AdamW step; returns the noise-free mean loss of the sample's finite losses (display only).

        An image whose loss or gradient is not finite contributes nothing
        (:func:`backbones.mae.clipping.clip_factors`: the null image of the zero-out relation), so nothing here raises on a private value; only the public noisy update and
        the weights it gives may stop the run (:func:`_stop_if_not_finite`).
        """
        s, acc = self.s, self.accountant
        rank, world = _dist_info()
        n = len(self.source)
        self.count_step()
        sample = poisson_sample(n, acc.sample_rate, self.sampler.generator(self.step))  # same on every rank
        # one mask row per sampled slot, in sample order, same on every rank (public generator): a null image
        # in the zero-out relation keeps its slot, so no other image's mask changes
        noise = self._mask_noise(len(sample))
        mine = torch.arange(rank, len(sample), world)
        trainable, _ = split_params(self.model)
        grad_sum = {k: torch.zeros_like(v, dtype=torch.float32) for k, v in trainable.items()}
        # sum and count of the finite losses (display only); whether a file read differed from the pre-flight
        loss_sum = torch.zeros(3, device=self.device)
        for part in mine.split(s.physical_batch):
            if part.numel() == 0:  # an empty Poisson sample is a valid step: noise only
                continue
            summed, _, losses = clipped_grad_sum(self.model, self._images(sample[part]), noise[part],
                                                 s.clip, method=s.per_example, autocast_dtype=self.amp)
            for k in grad_sum:
                grad_sum[k] += summed[k]
            finite = torch.isfinite(losses)
            loss_sum[:2] += torch.stack([torch.where(finite, losses.float(), 0.0).sum(), finite.sum().float()])
            del summed
        if isinstance(self.source, FolderImages) and self.source.changed_read:
            loss_sum[2] = 1.0
        if world > 1:
            torch.distributed.all_reduce(loss_sum)
        total, count, changed = loss_sum.tolist()
        self.changed_read = self.changed_read or changed > 0  # known before anything can stop the step
        noisy = reduce_and_privatize(grad_sum, noise_std=acc.noise_multiplier * s.clip,
                                     denominator=acc.sample_rate * n,
                                     generator=self.noise.generator(self.step) if self.noise is not None else None)
        _stop_if_not_finite(noisy.values(), f"the noisy update of step {self.step + 1} is", "--noise-multiplier/--clip")
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                p.grad = noisy[name].to(p.dtype)
        self._set_lr()
        self.optimizer.step()
        _stop_if_not_finite([p for p in self.model.parameters() if p.requires_grad],
                            f"the weights after step {self.step + 1} are", "--lr")
        return total / count if count else float("nan")


def _stop_if_not_finite(tensors, what: str, lower: str) -> None:
    """Raise FloatingPointError (one line) when a public quantity of a DP step is not finite.

    Only for values computed after the noise (the noisy update, the new weights): whether the run stops is then a
    function of the released update and the public settings, never of one private image.
    """
    tensors = list(tensors)
    if tensors and not bool(torch.stack([torch.isfinite(t).all() for t in tensors]).all()):
        raise FloatingPointError(f"{what} not finite (a public value: the noisy update and the settings; no "
                                 f"private image can cause it, each one's contribution is clipped or zero): lower "
                                 f"{lower}")


def train(s: TrainSettings, resume: bool = False, progress: bool = True, stop_after: int | None = None,
          show_loss: bool = False) -> dict:
    """Run (or resume) a MAE training run to ``s.steps`` steps.

    ``stop_after`` ends this call after that many steps (a checkpoint is
    written first), as a preempted job would; ``resume=True`` continues it.

    A DP run shows and returns public quantities only (step, epsilon spent,
    img/s from the public expected batch q*N): its training loss is computed
    on private images without noise, so it is shown (and returned) only with
    ``show_loss=True``, which warns (:class:`PrivacyLeakWarning`). A
    non-private run always shows its loss. Nothing in a DP step raises on a
    private value (a non-finite image contributes nothing); only a non-finite
    noisy update or new weights (public) stop it, with FloatingPointError.

    An image folder is read and decoded in full before the first step (a
    pre-flight, :meth:`backbones.mae.data.FolderImages.preflight`): a damaged
    file is refused in one line naming it before anything is trained. In a
    DP run a file that differs from its pre-flight when a step reads it is a
    null image (it contributes nothing); ``changed_files_read`` says whether
    that happened, with no name or count. A DP run counts each step before it
    draws its noise, in ``<out>/dp_steps.json``
    (:func:`backbones.mae.checkpoint.write_step_journal`): a run resumed after
    a stop counts the steps lost since its checkpoint, so its epsilon is that
    of every noisy step taken.

    Returns
    -------
    dict
        ``checkpoint`` path, ``step``, ``loss`` (mean of the last logged
        window; None for a DP run without ``show_loss``), ``epsilon`` spent (DP), ``noise_multiplier``,
        ``sample_rate``, ``delta``, ``history`` ([step, loss or None, epsilon] per logged window) and, when
        exported, ``export`` (its path) and ``export_sha256``; DP: ``dp_steps`` (noisy steps counted),
        ``steps_redone`` (those beyond ``step``: lost at stops and redone) and ``changed_files_read``.
    """
    cfg = MAE_SIZES[s.size]
    ckpt = os.path.join(s.out, "checkpoint.pth")
    journal = os.path.join(s.out, STEP_JOURNAL)
    for path in (ckpt, journal):  # two runs in one --out would overwrite each other's records
        if not resume and os.path.exists(path) and not (path == journal and _no_step_taken(ckpt, journal)):
            raise FileExistsError(f"{path} exists (another run): pass --resume to continue it, or another --out")
    source, private = make_source(s.data, cfg.img_size, seed=s.seed)
    if private and not s.dp:
        warnings.warn(f"training on {s.data!r} without --dp: the weights are not differentially private",
                      PrivacyLeakWarning, stacklevel=2)
    if s.dp and not private:
        warnings.warn("--dp on public synthetic data: privacy accounting is meaningless here", stacklevel=2)
    run = _Run(s, source, len(source) if s.dp else None)
    if resume:
        run.restore(ckpt)
    rank, _ = _dist_info()
    if run.redone and rank == 0:
        warnings.warn(f"{run.redone} noisy steps taken after the checkpoint of step {run.step} were lost at a stop: "
                      f"they are counted ({run.accountant.steps} noisy steps for {run.step} steps trained), so this "
                      f"run ends above its planned epsilon", stacklevel=2)
    if isinstance(source, FolderImages):  # every file read and decoded before anything is trained
        source.preflight(progress=progress and rank == 0, null_on_change=s.dp)
    ledger = _charge_ledger(run, source, s) if s.dp and rank == 0 else None  # before the first step
    if rank == 0:  # what earlier runs in this --out that were killed mid-write left behind
        for path in (ckpt, run.journal, export_path(s)):
            if path is not None:
                remove_stale_temporaries(path)
        if s.dp and not resume:  # journal and checkpoint at step 0: a stop at any later step can be resumed
            run.save(ckpt)
    show_loss = show_loss or not s.dp
    if s.dp and show_loss and rank == 0:
        warnings.warn("the training loss shown is computed on private images without noise: it is not "
                      "differentially private; do not publish it (checkpoints do not store it)", PrivacyLeakWarning,
                      stacklevel=2)
    # images per step for the img/s shown: public (a DP run's expected batch q*N, not its secret sample sizes)
    per_step = run.accountant.sample_rate * len(source) if s.dp else s.batch_size

    from tqdm.auto import tqdm

    bar = tqdm(total=s.steps, initial=run.step, disable=not progress or rank != 0, desc="DP-MAE" if s.dp else "MAE",
               unit="step", dynamic_ncols=True)
    window, t0, first = [], time.time(), run.step
    last = s.steps if stop_after is None else min(s.steps, run.step + stop_after)
    while run.step < last:
        try:
            loss = run.dp_step() if s.dp else run.nonprivate_step()
        except BaseException:  # the step is counted already; keep what the run saw of changed files too
            if s.dp and rank == 0:
                changed = run.changed_read or (isinstance(source, FolderImages) and source.changed_read)
                with contextlib.suppress(OSError):  # best effort: the error in flight is the one to report
                    write_step_journal(run.journal, run.accountant.steps, changed)
            raise
        run.step += 1
        if not s.dp and not math.isfinite(loss):  # public images (or a run already warned non-private)
            raise FloatingPointError(f"loss is {loss} at step {run.step}; lower --lr")
        if show_loss and math.isfinite(loss):
            window.append(loss)
        if run.step % s.log_every == 0 or run.step == s.steps:
            eps = run.accountant.update() if s.dp else 0.0
            mean = sum(window) / len(window) if window else (float("nan") if show_loss else None)
            run.history.append([run.step, mean, eps])
            shown = {"loss": f"{mean:.4f}"} if show_loss else {}
            if s.dp:
                shown["eps"] = f"{eps:.3f}"
            shown["img/s"] = f"{per_step * (run.step - first) / max(time.time() - t0, 1e-9):.0f}"
            bar.set_postfix(**shown)
            window = []
        if rank == 0 and (run.step % s.ckpt_every == 0 or run.step == last):
            run.save(ckpt)
        bar.update(1)
    bar.close()
    result = {"checkpoint": ckpt, "step": run.step,
              "loss": (run.history[-1][1] if run.history else float("nan")) if show_loss else None,
              "history": run.history, "seconds": time.time() - t0, "init_missing": run.init_missing}
    if s.dp:
        acc = run.accountant
        result.update(n_private=len(source), epsilon=acc.update(), noise_multiplier=acc.noise_multiplier,
                      sample_rate=acc.sample_rate, delta=acc.delta, accountant=acc.accountant, dp_steps=acc.steps,
                      steps_redone=acc.steps - run.step, changed_files_read=bool(run.changed_read),
                      neighboring_relation=acc.neighboring_relation, neighbouring=acc.neighbouring,
                      dp_event=acc.dp_event(), seeded=dict(run.seeded), ledger=ledger)
    if s.export and rank == 0 and run.step == s.steps:
        result["export"] = export_path(s)
        result["export_sha256"] = export_encoder(run.model, result["export"], provenance=_provenance(s, result))
    return result


def _charge_ledger(run: "_Run", source, s: TrainSettings) -> dict | None:
    """Charge the ledger home, before the first step, for every noisy step this run will have taken: the steps its
    journal counts (stops included) plus those left to train, on the items it reads (``source.items``, as featurize
    names them, so a store of the same images composes with this run). A resumed run charges only steps not charged
    yet (entries ``dpmae-<run>-<total>``; the run's id is kept in its checkpoints). Returns ``{"items_set",
    "ledger_entry", "home"}``; None without items (public synthetic data). A cap on the items refuses the run here
    (:class:`privlin.ledger.PrivacyBudgetExceeded`).
    """
    items = getattr(source, "items", None)
    if items is None:
        return None
    import uuid

    from privlin.ledger import PrivacyLedger

    run.ledger_run = run_id = run.ledger_run or uuid.uuid4().hex  # a run resumed from before ledger homes: a new id
    led = PrivacyLedger.for_items(items, label=f"DP-MAE on {s.data}")
    acc = run.accountant
    planned = acc.steps + max(0, s.steps - run.step)  # noisy steps begun (journal) + steps left
    charged = sum(int(e.params.get("steps", 0)) for e in led.entries if e.params.get("run") == run_id)
    first = f"dpmae-{run_id}-"
    if planned > charged:
        more = dataclasses.replace(acc, steps=planned - charged)
        led.charge(more.dp_event(), mechanism="backbone DP training (DP-MAE)", epsilon=more.update(), delta=acc.delta,
                   params={"run": run_id, "steps": planned - charged, "data": s.data},
                   neighbouring=acc.neighboring_relation.lower(),
                   entry_id=f"{first}{planned}")
    ids = [e.id for e in led.entries if e.id.startswith(first)]
    return {"items_set": led.scope.key, "ledger_entry": ids[0] if ids else None, "home": led.home.where}


def _no_step_taken(ckpt: str, journal: str) -> bool:
    """A journal without a checkpoint that counts no step: a run killed while writing its step-0 checkpoint."""
    return not os.path.exists(ckpt) and read_step_journal(journal)["noisy_steps"] == 0


def _provenance(s: TrainSettings, result: dict) -> dict:
    hist = result["history"]
    marks = sorted({0, len(hist) // 4, len(hist) // 2, 3 * len(hist) // 4, len(hist) - 1}) if hist else []
    prov = {"trained_by": "backbones.mae.train", "settings": _public_settings(s),
            "command": _public_command(sys.argv) if sys.argv[0].endswith(("train.py", "__main__.py", "-m")) else None,
            "steps": result["step"],
            "images_seen_approx": round(result["step"] * (result["sample_rate"] * result["n_private"] if s.dp
                                                          else s.batch_size)),
            "preprocessing": "RGB in [0,1], ImageNet mean/std, 32x32 for vip_toy",
            "wall_seconds": round(result["seconds"], 1) if not s.dp else "not recorded (a DP run's time grows with "
                                                                          "its secret Poisson sample sizes)",
            "torch": torch.__version__}
    if s.dp:
        prov["privacy"] = {k: result[k] for k in ("epsilon", "delta", "noise_multiplier", "sample_rate", "accountant",
                                                   "neighboring_relation", "neighbouring", "n_private")}
        if result.get("ledger"):  # its entry in the ledger home (a random run id): what a store's fit matches it by.
            # Not the item set's hash: a function of exactly which images were read, it would tell a neighbour apart.
            prov["privacy"].update(ledger_entry=result["ledger"]["ledger_entry"])
        seeded = result["seeded"]
        prov["privacy"].update(
            clip=s.clip, steps=result["dp_steps"], steps_redone=result["steps_redone"],
            dp_event=event_to_dict(result["dp_event"]),
            accounted_as="privlin.accounting under dp-accounting's REPLACE_SPECIAL (zero-out)",
            seeded=any(seeded.values()),
            randomness={k: (f"SEEDED by the user (--{k}-seed): the guarantee does not hold against anyone who knows "
                            f"the seed" if seeded[k] else "secret: Philox keyed from 256 bits of os.urandom, not "
                            "recorded") for k in ("sample", "noise")})
        prov["loss_curve"] = "not released (computed on private data without noise)"
    else:
        prov["loss_curve"] = {"step_mean_loss": [[hist[i][0], round(hist[i][1], 5)] for i in marks]}
    return prov


def _public_command(argv: list[str]) -> str:
    """The command line with the values of secret options withheld."""
    secret = {"--" + k.replace("_", "-") for k in SECRET_SETTINGS}
    out, hide = [], False
    for a in argv[1:]:
        if hide:
            out.append("<withheld>")
            hide = False
            continue
        name = a.split("=", 1)[0]
        if name in secret:
            out.append(f"{name}=<withheld>" if "=" in a else a)
            hide = "=" not in a
            continue
        out.append(a)
    return "python -m backbones.mae.train " + " ".join(out)


def run_dp_event(record):
    """The dp-accounting event of a DP-MAE run, ready to charge a ledger with (one call).

    Parameters
    ----------
    record : str, os.PathLike or dict
        The exported encoder's provenance JSON (``<export>.json``), its
        ``"privacy"`` block or the whole dict, or a training checkpoint
        (``checkpoint.pth``).

    Returns
    -------
    dp_accounting.DpEvent
        ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps)``
        under the relation ``NeighboringRelation.REPLACE_SPECIAL`` (zero-out).

    Raises
    ------
    ValueError
        The record holds no DP run, or its event disagrees with its own sigma, q and steps (damaged).
    """
    import json

    from .dp import dp_event

    if isinstance(record, (str, os.PathLike)):
        path = os.fspath(record)
        if path.endswith(".json"):
            with open(path) as f:
                record = json.load(f)
        else:
            acc = load_checkpoint(path)["accountant"]
            if acc is None:
                raise ValueError(f"{path!r} is a non-private run: no dp event")
            return DPAccountantState(**acc).dp_event()
    privacy = record.get("privacy", record)
    if "dp_event" not in privacy:
        raise ValueError("the record holds no dp_event (not a DP-MAE run, or written before events were recorded)")
    event = event_from_dict(privacy["dp_event"])
    expected = dp_event(privacy["noise_multiplier"], privacy["sample_rate"], privacy["steps"])
    if event != expected:
        raise ValueError(f"the record's dp_event {event} disagrees with its sigma, q and steps ({expected}): damaged")
    return event


def train_command(s: TrainSettings, *, resume: bool, progress: bool, show_loss: bool,
                  threads: int | None) -> dict | None:
    """The command line's run of :func:`train` (settings already checked): sets torch's CPU threads, joins a
    torchrun group when ``WORLD_SIZE`` > 1 and leaves it at the end. Returns the result on rank 0, None elsewhere."""
    if threads is not None:
        torch.set_num_threads(threads)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun
        torch.distributed.init_process_group("nccl" if _device(s).type == "cuda" else "gloo")
    try:
        result = train(s, resume=resume, progress=progress, show_loss=show_loss)
        rank, _ = _dist_info()
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return result if rank == 0 else None
