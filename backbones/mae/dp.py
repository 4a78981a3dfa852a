"""The DP pieces of DP-MAE: secret randomness, Poisson sampling, Gaussian noise, privacy accounting.

Privacy guarantee of :func:`backbones.mae.train.train` with ``dp=True``:

* neighbouring relation: **zero-out** -- replace one private image by a null
  image that contributes nothing (dp-accounting's
  ``NeighboringRelation.REPLACE_SPECIAL``, Kairouz et al. 2021, Def. 1.1).
  The run publishes N exactly (it normalizes the noisy sum by the public
  q*N), so this, not add/remove, is the relation the code satisfies. The null
  image keeps its slot in the sample, so every other sampled image keeps its
  mask row: one image moves a logical step's clipped sum by at most C. For
  the Poisson-subsampled Gaussian, dp-accounting gives the same epsilon for
  REPLACE_SPECIAL as for ADD_OR_REMOVE_ONE; the numbers are computed by
  ``privlin.accounting`` under ``replace_special``, and a test checks them
  against dp-accounting called directly;
* mechanism: T steps of the Poisson-subsampled Gaussian mechanism, sampling
  rate q, each image's gradient clipped to L2 norm C (after its own random
  mask), Gaussian noise N(0, sigma^2 C^2 I) added ONCE to the sum of the
  logical batch, however many physical batches it was accumulated from; an
  empty sample is a valid step (noise only). An image whose loss or
  gradient norm is not finite (NaN, inf, overflow) gets clip factor 0 and
  contributes exactly nothing, as a null image: no per-example value can
  stop the run; only the public noisy update and the new weights are
  checked (a non-finite one stops it);
* accountant: ``privlin.accounting`` (PLD by default, RDP on request), which
  also calibrates sigma to the target (epsilon, delta). It counts every noisy
  step ever begun: each step is written to the run's step journal before it
  draws its noise (:func:`backbones.mae.checkpoint.write_step_journal`), so
  steps lost at a stop after the last checkpoint and redone by a resumed run
  are counted twice, never zero times;
* secret randomness: the Poisson sample and the noise each come from a
  :class:`SecretStream` keyed by 256 bits of ``os.urandom`` (unless the user
  passes a seed: then the run is labelled seeded). Neither the keys nor any
  generator state is written to a checkpoint or a provenance file; a resumed
  run draws fresh keys, hence fresh samples and fresh noise.

Under DDP (torchrun) rank 0 draws the sampler key and broadcasts it, so every
rank draws the same Poisson sample and processes its slice; the noise key
exists on rank 0 only, which adds the noise to its partial sum before the
all-reduce, so the reduced sum carries exactly one draw of N(0, sigma^2 C^2 I).
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

import numpy as np
import torch

__all__ = [
    "SECRET_BYTES",
    "NEIGHBORING_RELATION",
    "NEIGHBOURING",
    "SecretStream",
    "broadcast_stream",
    "poisson_sample",
    "add_gaussian_noise",
    "reduce_and_privatize",
    "DPAccountantState",
    "calibrate_sigma",
    "epsilon_spent",
    "default_delta",
    "dp_event",
    "PrivacyLeakWarning",
]


# One warning class for the whole project, so that a single filter covers every package.
from privlin.report import PrivacyLeakWarning  # noqa: E402

#: Bytes of ``os.urandom`` behind every unseeded secret stream (256 bits).
SECRET_BYTES = 32
#: dp-accounting's name of the relation the code satisfies (see the module docstring).
NEIGHBORING_RELATION = "REPLACE_SPECIAL"
NEIGHBOURING = "zero-out (replace one image by a null image; N public)"
#: privlin.accounting's name of the same relation (dp-accounting's, lower case).
_ACCOUNTED_AS = NEIGHBORING_RELATION.lower()


class SecretStream:
    """Per-step random generators from one secret key; nothing to store, nothing to restore.

    Step ``t``'s generator is numpy's ``Philox`` (a counter-based generator
    built on a keyed bijection, Salmon et al. 2011) whose 128-bit key is
    ``SeedSequence(entropy, spawn_key=(t,), pool_size=8).generate_state(2,
    uint64)``. ``entropy`` is 256 bits of ``os.urandom`` (the OS's
    cryptographic source) unless a seed is given, so each key carries 128
    bits of OS entropy: not guessable, unlike a 32-bit Mersenne Twister seed.
    Deriving each step's generator from (entropy, t) makes a seeded run
    resume bit for bit without ever saving a generator state.

    The entropy is held in this object only: it has no ``repr`` of it and
    refuses to be pickled, so it cannot reach a checkpoint by accident.

    Parameters
    ----------
    seed : int or None
        None (default): 256 bits of ``os.urandom``. An int makes the stream
        reproducible (and the run *seeded*: anyone who knows the seed knows
        the stream).
    """

    def __init__(self, seed: int | None = None):
        self.seeded = seed is not None
        if seed is None:
            self.__entropy = int.from_bytes(os.urandom(SECRET_BYTES), "little")
        else:
            if isinstance(seed, bool) or int(seed) != seed or seed < 0:
                raise ValueError(f"a seed must be a non-negative integer, got {seed!r}")
            self.__entropy = int(seed)

    def generator(self, step: int) -> np.random.Generator:
        """The generator of step ``step`` (a fresh object each call, same stream for the same step)."""
        return np.random.Generator(np.random.Philox(self._seed_sequence(step)))

    def _seed_sequence(self, step: int) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.__entropy, spawn_key=(int(step),), pool_size=8)

    def to_words(self) -> np.ndarray:
        """The entropy as 64-bit words (to broadcast it to other ranks; never to save it)."""
        e, words = self.__entropy, []
        while True:
            words.append(e & (2**64 - 1))
            e >>= 64
            if not e and len(words) >= SECRET_BYTES // 8:
                break
        return np.array(words, dtype=np.uint64)

    @classmethod
    def from_words(cls, words, seeded: bool) -> "SecretStream":
        out = cls.__new__(cls)
        out.seeded = bool(seeded)
        out.__entropy = sum(int(w) << (64 * i) for i, w in enumerate(np.asarray(words, dtype=np.uint64)))
        return out

    def __repr__(self) -> str:
        return f"SecretStream(seeded={self.seeded})"

    def __reduce__(self):
        raise TypeError("a SecretStream holds a secret key and is never pickled (checkpoints store no keys)")


def broadcast_stream(stream: SecretStream | None) -> SecretStream:
    """Rank 0's stream on every rank of ``torch.distributed`` (the identity without it).

    Other ranks pass None. Used for the sampler only: the noise key never leaves rank 0.
    """
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return stream
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    if dist.get_rank() == 0:
        words = stream.to_words()
        header = torch.tensor([len(words), int(stream.seeded)], dtype=torch.int64, device=device)
    else:
        header = torch.zeros(2, dtype=torch.int64, device=device)
    dist.broadcast(header, src=0)
    n, seeded = (int(v) for v in header.tolist())
    payload = (torch.from_numpy(stream.to_words().view(np.int64)).to(device) if dist.get_rank() == 0
               else torch.zeros(n, dtype=torch.int64, device=device))
    dist.broadcast(payload, src=0)
    return SecretStream.from_words(payload.cpu().numpy().view(np.uint64), seeded=bool(seeded))


def poisson_sample(n: int, sample_rate: float, generator: np.random.Generator) -> torch.Tensor:
    """Indices of a Poisson sample: each of ``n`` examples is in it with probability q.

    Returns
    -------
    torch.Tensor, shape (b,), int64, sorted; b is random with mean q*n (may be 0).
    """
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    return torch.from_numpy(np.flatnonzero(generator.random(n) < sample_rate).astype(np.int64))


def add_gaussian_noise(tensors: dict, std: float, generator: np.random.Generator) -> dict:
    """``t + N(0, std^2)`` for every tensor, fresh noise per coordinate, drawn on the host in float64."""
    return {k: t + torch.from_numpy(generator.standard_normal(tuple(t.shape)) * std).to(t.device, t.dtype)
            for k, t in tensors.items()}


def reduce_and_privatize(grad_sum: dict, *, noise_std: float, denominator: float,
                         generator: np.random.Generator | None) -> dict:
    """Noisy mean gradient of one logical step: (sum of clipped grads + noise) / denominator.

    Under ``torch.distributed`` the partial sums of all ranks are all-reduced
    and only rank 0 adds noise (one draw in total; ``generator`` is ``None``
    on other ranks). ``denominator`` is the expected batch q*N (a public
    number, unlike the sampled batch size).
    """
    dist = torch.distributed
    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    if rank == 0 and generator is None:
        raise ValueError("rank 0 needs the noise generator")
    out = add_gaussian_noise(grad_sum, noise_std, generator) if rank == 0 else dict(grad_sum)
    if distributed:
        for t in out.values():
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return {k: t / denominator for k, t in out.items()}


@dataclass
class DPAccountantState:
    """What the accountant needs, stored in every checkpoint (no keys, no generator states).

    ``epsilon`` is spent after ``steps`` steps under ``neighboring_relation``
    (Poisson rate ``sample_rate``, noise multiplier ``noise_multiplier``).
    """

    noise_multiplier: float
    sample_rate: float
    delta: float
    target_epsilon: float | None
    accountant: str = "pld"
    steps: int = 0
    epsilon: float = 0.0
    neighboring_relation: str = NEIGHBORING_RELATION
    neighbouring: str = NEIGHBOURING

    def update(self) -> float:
        """Recompute ``epsilon`` for ``steps`` with ``privlin.accounting``."""
        self.epsilon = epsilon_spent(self.noise_multiplier, self.sample_rate, self.steps, self.delta,
                                     self.accountant)
        return self.epsilon

    def dp_event(self):
        """The dp-accounting event of the steps run so far (None before the first)."""
        return dp_event(self.noise_multiplier, self.sample_rate, self.steps)

    def to_dict(self) -> dict:
        return asdict(self)


def default_delta(n: int) -> float:
    """delta well below 1/N: ``min(1e-5, 1/(10 N))``."""
    return min(1e-5, 1.0 / (10 * n))


def calibrate_sigma(epsilon: float, delta: float, steps: int, sample_rate: float, accountant: str = "pld") -> float:
    """Noise multiplier reaching (epsilon, delta) after ``steps`` Poisson-sampled steps."""
    from privlin import accounting

    return float(accounting.calibrate_noise(epsilon, delta, steps=steps, sample_rate=sample_rate,
                                            accountant=accountant, neighbouring=_ACCOUNTED_AS))


def epsilon_spent(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  accountant: str = "pld") -> float:
    """epsilon after ``steps`` steps (0 before the first)."""
    if steps == 0:
        return 0.0
    from privlin import accounting

    eps = float(accounting.dpsgd_epsilon(noise_multiplier, sample_rate, steps, delta, accountant=accountant,
                                         neighbouring=_ACCOUNTED_AS))
    return eps if math.isfinite(eps) else float("inf")


def dp_event(noise_multiplier: float, sample_rate: float, steps: int):
    """``privlin.accounting.dp_event`` of ``steps`` DP-MAE steps (None when ``steps`` is 0)."""
    if steps == 0:
        return None
    from privlin import accounting

    return accounting.dp_event(noise_multiplier, steps=steps, sample_rate=sample_rate)


