"""Image sources for MAE training: synthetic (public), digits and image folders (private).

A source is anything with ``len(src)`` and ``src[indices] -> (B, 3, H, W)``
float32 in [0, 1]; training normalizes with the ImageNet mean/std of MAE, the
same preprocessing the ViP backbones use. Indexed access (rather than a
DataLoader iterator) is what Poisson sampling and exact resumption need: a
step's batch is a function of the sampling generator's state alone.
"""
from __future__ import annotations

import functools
import hashlib
import io
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

    Labels are ignored (MAE is self-supervised). The file list is fixed when
    the source is made (N is public). :meth:`preflight` reads and decodes
    every file once before training and keeps each file's sha256; from then
    on a read whose bytes differ from the pre-flight (changed, replaced,
    deleted, unreadable) is either an error naming the file (non-private
    runs) or, in a DP run, the null image of the zero-out relation: an
    all-NaN image, which the DP step gives clip factor 0 (it contributes
    nothing; its slot and every other image's mask are kept). The bytes
    decoded are the bytes hashed, so an unchanged file decodes as it did in
    the pre-flight.
    """

    def __init__(self, root: str, size: int):
        from torchvision import datasets, transforms

        if not os.path.isdir(root):
            raise FileNotFoundError(f"image folder {root!r} does not exist")
        self.size = size
        self.transform = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size),
                                             transforms.ToTensor()])
        self.paths = [path for path, _ in datasets.ImageFolder(root).samples]  # lists only; decodes nothing
        self.digests: np.ndarray | None = None  # (N, 32) sha256 of each file's bytes at the pre-flight
        self.null_on_change = False
        self.changed_read = False  # a read differed from the pre-flight (DP: counted as a null image)

    def __len__(self) -> int:
        return len(self.paths)

    def _decode(self, data: bytes) -> torch.Tensor:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as im:
            return self.transform(im.convert("RGB"))[:3].expand(3, -1, -1)

    def _read(self, i: int) -> tuple[bytes, bytes]:
        with open(self.paths[i], "rb") as f:
            data = f.read()
        return data, hashlib.sha256(data).digest()

    def _check(self, i: int) -> tuple[bytes | None, str | None]:
        """The pre-flight of file ``i``: its sha256, or why it cannot be trained on."""
        try:
            data, digest = self._read(i)
            self._decode(data)
            return digest, None
        except Exception as e:  # unreadable, truncated, not an image, a decompression bomb ...
            return None, _reason(e)

    def preflight(self, progress: bool = True, null_on_change: bool = False, workers: int | None = None) -> None:
        """Read and decode every file once, before training; keep each file's sha256.

        Decoding runs in threads (PIL releases the GIL while it decodes); a bar shows progress. It is a check of
        the files by whoever runs the job (who holds them), made before any noisy step, and nothing of it is
        recorded.

        Parameters
        ----------
        null_on_change : bool
            How a later read that differs from the pre-flight is treated: a null image (True: DP runs) or an
            error naming the file (False).

        Raises
        ------
        ValueError
            A file cannot be read or decoded: names the first (in file order) and counts the others.
        """
        from concurrent.futures import ThreadPoolExecutor

        from tqdm.auto import tqdm

        n = len(self.paths)
        digests = np.zeros((n, 32), dtype=np.uint8)
        bad: list[tuple[int, str]] = []
        block = 1024  # bounded work in flight: the list of files may be long
        with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool, \
                tqdm(total=n, desc="pre-flight: decoding every training image", unit="img", disable=not progress,
                     dynamic_ncols=True) as bar:
            for start in range(0, n, block):
                idx = range(start, min(n, start + block))
                for i, (digest, error) in zip(idx, pool.map(self._check, idx)):
                    if error is None:
                        digests[i] = np.frombuffer(digest, dtype=np.uint8)
                    else:
                        bad.append((i, error))
                bar.update(len(idx))
        if bad:
            i, error = bad[0]
            more = f" (and {len(bad) - 1} other files)" if len(bad) > 1 else ""
            raise ValueError(f"{self.paths[i]}: cannot be decoded ({error}){more}; repair or remove it before "
                             f"training (checked before the first step: nothing was trained)")
        self.digests, self.null_on_change, self.changed_read = digests, bool(null_on_change), False

    def _load(self, i: int) -> torch.Tensor:
        if self.digests is None:
            data, _ = self._read(i)
            return self._decode(data)
        try:
            data, digest = self._read(i)
            if digest != self.digests[i].tobytes():
                raise ValueError("its bytes differ from the pre-flight")
            return self._decode(data)
        except Exception as e:
            if not self.null_on_change:
                raise ValueError(f"{self.paths[i]} changed during training ({_reason(e)})") from None
            self.changed_read = True
            return torch.full((3, self.size, self.size), float("nan"))

    def __getitem__(self, indices) -> torch.Tensor:
        return torch.stack([self._load(int(i)) for i in np.atleast_1d(indices)])


def _reason(e: Exception) -> str:
    """One line on why a file could not be used (PIL's "cannot identify" names a BytesIO object, not the file)."""
    from PIL import UnidentifiedImageError

    if isinstance(e, UnidentifiedImageError):
        return "not an image PIL can identify"
    text = str(e).splitlines()[0][:160] if str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


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
