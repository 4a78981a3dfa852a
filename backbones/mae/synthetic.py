"""Procedural "shader" images for non-private MAE pretraining, made on the fly.

ViP warm-starts DP training from a MAE pretrained on Shaders21k (programs
that render waves, noise and colour maps). This generator follows that spirit
without files or downloads: each image is a random composition of plane and
radial waves over a domain-warped grid plus 1/f wave noise, mapped through a
random cosine colour palette. Image ``i`` of a generator with seed ``s`` is a
pure function of ``(s, i)``, so the set is indexable, reproducible and
infinite, and it holds no private data (privacy cost zero).
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["ShaderImages", "render_shader"]


def render_shader(rng: np.random.Generator, size: int) -> np.ndarray:
    """Render one procedural image.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of every random choice of this image.
    size : int
        Height and width in pixels.

    Returns
    -------
    numpy.ndarray, shape (3, size, size), float32 in [0, 1]
    """
    lin = np.linspace(-1.0, 1.0, size, dtype=np.float32)
    v, u = np.meshgrid(lin, lin, indexing="ij")
    # domain warp: bends every wave below the same way
    for _ in range(rng.integers(0, 3)):
        a, f, p = rng.uniform(0.0, 0.5), rng.uniform(1.0, 6.0), rng.uniform(0, 2 * np.pi)
        u, v = u + a * np.sin(f * v + p), v + a * np.sin(f * u + p + 1.3)
    field = np.zeros_like(u)
    for _ in range(rng.integers(1, 5)):  # plane waves
        theta, freq = rng.uniform(0, np.pi), rng.uniform(1.0, 12.0)
        field += rng.uniform(0.3, 1.0) * np.sin(freq * (np.cos(theta) * u + np.sin(theta) * v) + rng.uniform(0, 2 * np.pi))
    for _ in range(rng.integers(0, 3)):  # radial waves (rings)
        cx, cy, freq = rng.uniform(-1, 1), rng.uniform(-1, 1), rng.uniform(2.0, 15.0)
        field += rng.uniform(0.3, 1.0) * np.sin(freq * np.hypot(u - cx, v - cy) + rng.uniform(0, 2 * np.pi))
    k = rng.uniform(0.5, 12.0, size=8)  # 1/f wave noise
    th = rng.uniform(0, np.pi, size=8)
    ph = rng.uniform(0, 2 * np.pi, size=8)
    noise_amp = rng.uniform(0.0, 1.0)
    for kk, tt, pp in zip(k, th, ph):
        field += noise_amp / kk * np.sin(kk * (np.cos(tt) * u + np.sin(tt) * v) + pp)
    if rng.random() < 0.3:  # hard edges: quantize into bands
        levels = rng.integers(2, 6)
        field = np.floor(field * levels) / levels
    lo, hi = field.min(), field.max()
    t = (field - lo) / (hi - lo + 1e-6)
    # cosine palette a + b cos(2 pi (c t + d)), one random palette per image
    a = rng.uniform(0.2, 0.8, size=(3, 1, 1))
    b = rng.uniform(0.1, 0.5, size=(3, 1, 1))
    c = rng.uniform(0.3, 2.0, size=(3, 1, 1))
    d = rng.uniform(0.0, 1.0, size=(3, 1, 1))
    img = a + b * np.cos(2 * np.pi * (c * t[None] + d))
    return np.clip(img, 0.0, 1.0).astype(np.float32)


class ShaderImages:
    """An indexable, seeded set of procedural images.

    Parameters
    ----------
    size : int
        Image height and width.
    seed : int
        Image ``i`` is rendered from ``numpy.random.default_rng([seed, i])``.
    length : int
        Nominal length (the generator is infinite; this bounds indexing).

    Examples
    --------
    >>> imgs = ShaderImages(32, seed=0)[np.arange(8)]   # (8, 3, 32, 32) float32 in [0, 1]
    """

    def __init__(self, size: int = 32, seed: int = 0, length: int = 2**62):
        self.size, self.seed, self.length = int(size), int(seed), int(length)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, indices) -> torch.Tensor:
        """Images for an integer array of indices: (B, 3, size, size) in [0, 1]."""
        idx = np.atleast_1d(np.asarray(indices, dtype=np.int64))
        if idx.size and (idx.min() < 0 or idx.max() >= self.length):
            raise IndexError(f"index out of range [0, {self.length})")
        out = np.stack([render_shader(np.random.default_rng([self.seed, int(i)]), self.size) for i in idx])
        return torch.from_numpy(out)
