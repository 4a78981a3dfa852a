"""The DP pieces of DP-MAE: Poisson sampling, Gaussian noise, privacy accounting.

Privacy guarantee of :func:`backbones.mae.train.train` with ``dp=True``:

* neighbouring relation: add or remove one private image (the dataset size N
  is treated as public);
* mechanism: T steps of the Poisson-subsampled Gaussian mechanism, sampling
  rate q, each image's gradient clipped to L2 norm C (after its own random
  mask), Gaussian noise N(0, sigma^2 C^2 I) added ONCE to the sum of the
  logical batch, however many physical batches it was accumulated from;
* accountant: ``privlin.accounting`` (PLD by default, RDP on request), which
  also calibrates sigma to the target (epsilon, delta).

Under DDP (torchrun) every rank draws the same Poisson sample from an
identically seeded generator and processes its slice; the noise is drawn only
on rank 0 and added to rank 0's partial sum before the all-reduce, so the
reduced sum carries exactly one draw of N(0, sigma^2 C^2 I).
"""
from __future__ import annotations

import math
import secrets
from dataclasses import asdict, dataclass

import torch

__all__ = [
    "poisson_sample",
    "add_gaussian_noise",
    "reduce_and_privatize",
    "seeded_generator",
    "DPAccountantState",
    "calibrate_sigma",
    "epsilon_spent",
    "PrivacyLeakWarning",
]


# One warning class for the whole project, so that a single filter covers every package.
from privlin.report import PrivacyLeakWarning  # noqa: E402


def seeded_generator(seed: int | None) -> torch.Generator:
    """A CPU generator from ``seed``, or from the OS's cryptographic source when ``None``."""
    g = torch.Generator()
    g.manual_seed(secrets.randbits(63) if seed is None else int(seed))
    return g


def poisson_sample(n: int, sample_rate: float, generator: torch.Generator) -> torch.Tensor:
    """Indices of a Poisson sample: each of ``n`` examples is in it with probability q.

    Returns
    -------
    torch.Tensor, shape (b,), int64, sorted; b is random with mean q*n (may be 0).
    """
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    return torch.nonzero(torch.rand(n, generator=generator) < sample_rate).flatten()


def add_gaussian_noise(tensors: dict, std: float, generator: torch.Generator) -> dict:
    """``t + N(0, std^2)`` for every tensor, fresh noise per coordinate."""
    return {k: t + std * torch.randn(t.shape, generator=generator, dtype=t.dtype).to(t.device)
            for k, t in tensors.items()}


def reduce_and_privatize(grad_sum: dict, *, noise_std: float, denominator: float,
                         generator: torch.Generator | None) -> dict:
    """Noisy mean gradient of one logical step: (sum of clipped grads + noise) / denominator.

    Under ``torch.distributed`` the partial sums of all ranks are all-reduced
    and only rank 0 adds noise (one draw in total; ``generator`` may be
    ``None`` on other ranks). ``denominator`` is the expected batch q*N (a
    public number, unlike the sampled batch size).
    """
    dist = torch.distributed
    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    out = add_gaussian_noise(grad_sum, noise_std, generator) if rank == 0 else dict(grad_sum)
    if distributed:
        for t in out.values():
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return {k: t / denominator for k, t in out.items()}


@dataclass
class DPAccountantState:
    """What the accountant needs, stored in every checkpoint.

    ``epsilon`` is the (epsilon, delta) spent after ``steps`` steps (add/remove one
    image, Poisson rate ``sample_rate``, noise multiplier ``noise_multiplier``).
    """

    noise_multiplier: float
    sample_rate: float
    delta: float
    target_epsilon: float | None
    accountant: str = "pld"
    steps: int = 0
    epsilon: float = 0.0
    neighbouring: str = "add/remove one image; dataset size public"

    def update(self) -> float:
        """Recompute ``epsilon`` for ``steps`` with ``privlin.accounting``."""
        self.epsilon = epsilon_spent(self.noise_multiplier, self.sample_rate, self.steps, self.delta,
                                     self.accountant)
        return self.epsilon

    def to_dict(self) -> dict:
        return asdict(self)


def calibrate_sigma(epsilon: float, delta: float, steps: int, sample_rate: float, accountant: str = "pld") -> float:
    """Noise multiplier reaching (epsilon, delta) after ``steps`` Poisson-sampled steps."""
    from privlin import accounting

    return float(accounting.calibrate_noise(epsilon, delta, steps=steps, sample_rate=sample_rate,
                                            accountant=accountant))


def epsilon_spent(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  accountant: str = "pld") -> float:
    """epsilon after ``steps`` steps (0 before the first step)."""
    if steps == 0:
        return 0.0
    from privlin import accounting

    eps = float(accounting.dpsgd_epsilon(noise_multiplier, sample_rate, steps, delta, accountant=accountant))
    return eps if math.isfinite(eps) else float("inf")
