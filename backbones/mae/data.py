"""Image sources for MAE training: synthetic (public), digits and image folders (private).

A source is anything with ``len(src)`` and ``src[indices] -> (B, 3, H, W)``
float32 in [0, 1]; training normalizes with the ImageNet mean/std of MAE, the
same preprocessing the ViP backbones use. Indexed access (rather than a
DataLoader iterator) is what Poisson sampling and exact resumption need: a
step's batch is a function of the sampling generator's state alone.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import torch

from .synthetic import ShaderImages

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "normalize",
    "TensorImages",
    "FolderImages",
    "digits_split",
    "make_source",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def normalize(imgs: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) in [0, 1] -> ImageNet-normalized, as the ViP backbones expect."""
    mean = imgs.new_tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = imgs.new_tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return (imgs - mean) / std


class TensorImages:
    """An in-memory source: ``images`` (N, 3, H, W) float32 in [0, 1]."""

    def __init__(self, images: torch.Tensor):
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be (N, 3, H, W), got {tuple(images.shape)}")
        self.images = images.float().contiguous()

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, indices) -> torch.Tensor:
        return self.images[torch.as_tensor(np.asarray(indices, dtype=np.int64))]


DIGITS_TEST_FRACTION, DIGITS_SEED = 0.2, 0  # the same public split rule as featurize's embedded digits


@functools.lru_cache(maxsize=2)
def _digits_pixels(size: int) -> torch.Tensor:
    """All 1797 digits as featurize renders them: uint8, RGB, bicubic-resized to ``size``, then [0, 1]."""
    from PIL import Image
    from sklearn.datasets import load_digits  # bundled with scikit-learn: no download
    from torchvision.transforms import InterpolationMode, Resize

    images = np.rint(load_digits().images * (255.0 / 16.0)).astype(np.uint8)
    resize = Resize(size, interpolation=InterpolationMode.BICUBIC, antialias=True)
    out = [np.asarray(resize(Image.fromarray(im).convert("RGB"))) for im in images]
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).float().div_(255.0).contiguous()


def digits_split(split: str = "train", size: int = 32):
    """scikit-learn's 8x8 digits at ``size`` pixels, split as ``featurize``'s embedded ``digits``.

    The split rule is public (``train_test_split(test_size=0.2, stratify=y,
    random_state=0)``), so the rows DP-MAE trains on are exactly the rows a
    probe on featurize's ``digits/train`` sees.

    Parameters
    ----------
    split : {"train", "test"}
    size : int
        Output height and width.

    Returns
    -------
    images : torch.Tensor, shape (N, 3, size, size), float32 in [0, 1]
    labels : numpy.ndarray, shape (N,), int64
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if split not in ("train", "test"):
        raise ValueError(f"digits has splits 'train' and 'test', not {split!r}")
    y = load_digits().target.astype(np.int64)
    train, test = train_test_split(np.arange(len(y)), test_size=DIGITS_TEST_FRACTION, stratify=y,
                                   random_state=DIGITS_SEED)
    rows = np.sort(train if split == "train" else test)
    return _digits_pixels(size)[torch.from_numpy(rows)], y[rows]


class FolderImages:
    """Images of a torchvision ``ImageFolder`` tree, resized and center-cropped to ``size``.

    Labels are ignored (MAE is self-supervised).
    """

    def __init__(self, root: str, size: int):
        from torchvision import datasets, transforms

        if not os.path.isdir(root):
            raise FileNotFoundError(f"image folder {root!r} does not exist")
        self.size = size
        tf = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size), transforms.ToTensor()])
        self.dataset = datasets.ImageFolder(root, transform=tf)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, indices) -> torch.Tensor:
        return torch.stack([self.dataset[int(i)][0][:3].expand(3, -1, -1) for i in np.atleast_1d(indices)])


def make_source(spec: str, size: int, seed: int = 0):
    """Source from a CLI spec: ``synthetic``, ``digits`` (train split) or ``imagefolder:PATH``.

    Returns
    -------
    source, is_private : (object, bool)
        Synthetic images are public (generated); every other source is private.
    """
    if spec == "synthetic":
        return ShaderImages(size, seed=seed), False
    if spec == "digits":
        return TensorImages(digits_split("train", size)[0]), True
    if spec.startswith("imagefolder:"):
        return FolderImages(spec.split(":", 1)[1], size), True
    raise ValueError(f"unknown data spec {spec!r}; use synthetic, digits or imagefolder:PATH")
