"""One split of a dataset as the readers give it (:mod:`featurize.datasets`, :mod:`featurize.hf`) to the job."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from PIL import Image


@dataclass
class ImageSplit:
    """One split of a dataset.

    Attributes
    ----------
    dataset, split : str
    ids : list of str, length N
        Stable row identifiers.
    labels : int64 array (N,)
    classes : list of str or None
        ``classes[label]`` is the class name; None where the dataset publishes no class list.
    images : FileImages, ArrayImages, TarImages or HFImages
        ``read(i)`` decodes row ``i``; those holding encoded files also give them as ``raw(i)`` (bytes), which the
        job's draft and device decode paths take.
    attrs : dict
        Where the data came from (root folder, split rule), recorded in the store.
    items : list of str or None
        Each row's item where it is a public name's (built-in datasets); None where the images are encoded files,
        whose items are the hashes of ``images.raw(i)``, taken by :func:`row_item` where the bytes are read.
    """

    dataset: str
    split: str
    ids: list
    labels: np.ndarray
    classes: list
    images: object
    attrs: dict = field(default_factory=dict)
    items: list | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def read(self, i: int) -> Image.Image:
        return self.images.read(i)

    def describe(self, i: int) -> str:
        return f"{self.images.describe(i)} (id {self.ids[i]!r})"
