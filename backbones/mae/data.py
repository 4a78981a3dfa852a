"""Image sources for MAE training: synthetic (public), digits and image folders (private).

A source is anything with ``len(src)`` and ``src[indices] -> (B, 3, H, W)``
float32 in [0, 1]; a private one also has ``items``, each image's item
(:mod:`stores.items`) computed as featurize computes it, so a DP-MAE run and
a feature store of the same images name the same items (the per-image
ledger charges DP-MAE's run to them): a file's bytes hash for a folder (taken
by its pre-flight, which reads every file), ``digits:<index>`` for digits.
Training normalizes with the ImageNet mean/std of MAE, the
same preprocessing the ViP backbones use. Indexed access (rather than a
DataLoader iterator) is what Poisson sampling and exact resumption need: a
step's batch is a function of the sampling generator's state alone.
"""
from __future__ import annotations

import functools
import io
import os

import numpy as np
import torch

from stores.items import ITEM_CHARS, of_bytes

from .settings import check_data_spec
from .synthetic import ShaderImages

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "normalize",
    "TensorImages",
    "FolderImages",
    "digits_split",
    "check_data_spec",
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
    """An in-memory source: ``images`` (N, 3, H, W) float32 in [0, 1]; ``items`` their items, if they have any."""

    def __init__(self, images: torch.Tensor, items=None):
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be (N, 3, H, W), got {tuple(images.shape)}")
        self.images = images.float().contiguous()
        self.items = None if items is None else np.asarray(items, dtype=str)
        if self.items is not None and self.items.shape != (images.shape[0],):
            raise ValueError(f"items must have one entry per image ({images.shape[0]}), got {self.items.shape}")

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, indices) -> torch.Tensor:
        return self.images[torch.as_tensor(np.asarray(indices, dtype=np.int64))]


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
    from featurize.datasets import DatasetError, digits_rows

    try:
        rows, labels = digits_rows(split)
    except DatasetError as e:
        raise ValueError(str(e)) from None
    return _digits_pixels(size)[torch.from_numpy(rows)], labels


def digits_source(split: str, size: int) -> TensorImages:
    """The digits' ``split`` as a source whose items are featurize's (``digits:<index>``)."""
    from featurize.datasets import digits_items, digits_rows

    return TensorImages(digits_split(split, size)[0], items=digits_items(digits_rows(split)[0]))


class FolderImages:
    """Images of an image folder (``ROOT/<class>/<image>``), resized and center-cropped to ``size``.

    The files are listed as featurize lists ``imagefolder:ROOT``'s train split
    (ROOT itself where it has no split folders), so a feature store of the
    same folder holds the same files, and a file reached twice through links
    is refused in one line (it would count one image twice).
    Labels are ignored (MAE is self-supervised). The file list is fixed when
    the source is made (N is public). :meth:`preflight` reads and decodes
    every file once before training and keeps each file's item
    (:func:`stores.items.of_bytes` of its bytes, as featurize names it, so
    ``items`` is known from then; a 128-bit content hash); from then
    on a read whose bytes differ from the pre-flight (changed, replaced,
    deleted, unreadable) is either an error naming the file (non-private
    runs) or, in a DP run, the null image of the zero-out relation: an
    all-NaN image, which the DP step gives clip factor 0 (it contributes
    nothing; its slot and every other image's mask are kept). The bytes
    decoded are the bytes hashed, so an unchanged file decodes as it did in
    the pre-flight.
    """

    def __init__(self, root: str, size: int):
        from torchvision import transforms

        from featurize.datasets import open_split

        if not os.path.isdir(root):
            raise FileNotFoundError(f"image folder {root!r} does not exist")
        self.size = size
        self.transform = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size),
                                             transforms.ToTensor()])
        self.paths = open_split(f"imagefolder:{root}", "train").images.paths  # lists only; decodes nothing
        self.items: np.ndarray | None = None  # (N,) each file's item (its bytes' hash) at the pre-flight
        self.null_on_change = False
        self.changed_read = False  # a read differed from the pre-flight (DP: counted as a null image)

    def __len__(self) -> int:
        return len(self.paths)

    def _decode(self, data: bytes) -> torch.Tensor:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as im:
            return self.transform(im.convert("RGB"))[:3].expand(3, -1, -1)

    def _read(self, i: int) -> tuple[bytes, str]:
        with open(self.paths[i], "rb") as f:
            data = f.read()
        return data, of_bytes(data)

    def _check(self, i: int) -> tuple[str | None, str | None]:
        """The pre-flight of file ``i``: its item, or why it cannot be trained on."""
        try:
            data, item = self._read(i)
            self._decode(data)
            return item, None
        except Exception as e:  # unreadable, truncated, not an image, a decompression bomb ...
            return None, _reason(e)

    def preflight(self, progress: bool = True, null_on_change: bool = False, workers: int | None = None) -> None:
        """Read and decode every file once, before training; keep each file's item (``items``).

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
        items = np.empty(n, dtype=f"U{ITEM_CHARS}")
        bad: list[tuple[int, str]] = []
        block = 1024  # bounded work in flight: the list of files may be long
        with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool, \
                tqdm(total=n, desc="pre-flight: decoding every training image", unit="img", disable=not progress,
                     dynamic_ncols=True) as bar:
            for start in range(0, n, block):
                idx = range(start, min(n, start + block))
                for i, (item, error) in zip(idx, pool.map(self._check, idx)):
                    if error is None:
                        items[i] = item
                    else:
                        bad.append((i, error))
                bar.update(len(idx))
        if bad:
            i, error = bad[0]
            more = f" (and {len(bad) - 1} other files)" if len(bad) > 1 else ""
            raise ValueError(f"{self.paths[i]}: cannot be decoded ({error}){more}; repair or remove it before "
                             f"training (checked before the first step: nothing was trained)")
        self.items, self.null_on_change, self.changed_read = items, bool(null_on_change), False

    def _load(self, i: int) -> torch.Tensor:
        if self.items is None:
            data, _ = self._read(i)
            return self._decode(data)
        try:
            data, item = self._read(i)
            if item != self.items[i]:
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
    check_data_spec(spec)
    if spec == "synthetic":
        return ShaderImages(size, seed=seed), False
    if spec == "digits":
        return digits_source("train", size), True
    return FolderImages(spec.split(":", 1)[1], size), True
