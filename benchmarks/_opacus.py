"""Shared by the benchmark scripts: Opacus DP-SGD on a linear layer, the peer baseline privlin is compared with."""
from __future__ import annotations

import functools
import warnings

import numpy as np


@functools.lru_cache(maxsize=None)
def noise_multiplier(eps: float, delta: float, sample_rate: float, epochs: int) -> float:
    """σ from Opacus' own PRV accountant (what ``make_private_with_epsilon`` computes), once per setting."""
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return get_noise_multiplier(target_epsilon=eps, target_delta=delta, sample_rate=sample_rate, epochs=epochs,
                                    accountant="prv")


def linear_accuracy(Xtr, ytr, Xte, yte, k, *, eps, delta, lr, seed, batch, epochs, bias=True, momentum=0.9):
    """Test accuracy of a zero-init linear layer trained by Opacus DP-SGD (Poisson batches, clip 1, cross-entropy,
    SGD with momentum) at (ε, δ).  ``lr``: a number, or a function of Opacus' σ."""
    import torch
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(seed)
    model = torch.nn.Linear(Xtr.shape[1], k, bias=bias)
    for p in model.parameters():
        torch.nn.init.zeros_(p)
    loader = DataLoader(TensorDataset(torch.from_numpy(Xtr), torch.from_numpy(ytr).long()), batch_size=batch)
    sigma = noise_multiplier(eps, delta, 1.0 / len(loader), epochs)  # Opacus' sample rate
    opt = torch.optim.SGD(model.parameters(), lr=lr(sigma) if callable(lr) else lr, momentum=momentum)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = PrivacyEngine(accountant="prv").make_private(
            module=model, optimizer=opt, data_loader=loader, max_grad_norm=1.0, poisson_sampling=True,
            noise_multiplier=sigma)
        loss_fn = torch.nn.CrossEntropyLoss()
        for _ in range(epochs):
            for xb, yb in loader:
                if len(xb) == 0:
                    continue
                opt.zero_grad()
                loss_fn(model(xb), yb).backward()
                opt.step()
    with torch.no_grad():
        pred = model(torch.from_numpy(Xte)).argmax(1).numpy()
    return float(np.mean(pred == yte))
