"""Preprocessing split in two: geometry on the CPU (DataLoader workers), normalization on the device.

Workers resize and crop decoded images and hand over ``uint8`` tensors (4x less to copy than float32);
the model side scales to [0, 1] and applies mean/std, where the accelerator does it for free.
"""
from __future__ import annotations

import torch
from torch import nn
from torchvision import transforms
from torchvision.transforms import InterpolationMode

from .registry import Preprocessing

_INTERPOLATION = {"bicubic": InterpolationMode.BICUBIC, "bilinear": InterpolationMode.BILINEAR,
                  "nearest": InterpolationMode.NEAREST}


def geometry_transform(pre: Preprocessing):
    """PIL RGB image -> ``uint8`` tensor ``(3, crop, crop)``: resize the shorter side, then center crop."""
    if pre.interpolation not in _INTERPOLATION:
        raise ValueError(f"interpolation must be one of {sorted(_INTERPOLATION)}, got {pre.interpolation!r}")
    return transforms.Compose([
        transforms.Resize(pre.resize, interpolation=_INTERPOLATION[pre.interpolation], antialias=True),
        transforms.CenterCrop(pre.crop),
        transforms.PILToTensor(),
    ])


class Normalize(nn.Module):
    """``uint8 (B, 3, H, W)`` -> ``float ((x / 255 - mean) / std)`` on whatever device the batch is on."""

    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("scale", 1.0 / (255.0 * torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)))
        self.register_buffer("shift", (torch.tensor(mean, dtype=torch.float32) /
                                       torch.tensor(std, dtype=torch.float32)).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() * self.scale - self.shift
