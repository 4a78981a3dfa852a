"""Frozen-backbone feature extraction into feature stores (``featurize`` on the command line).

::

    import featurize
    featurize.extract("vip_toy", "digits", out="feats.zarr")          # every split, resumable
    featurize.open_split("cifar10", "test", data_dir="/data").labels  # the rows a store will hold

Everything loads on first use, so ``featurize --help`` answers without importing torch.
"""
from __future__ import annotations

from backbones.lazy import lazy_exports

#: Public name -> the module that defines it.
_LAZY = {"extract": "job", "extract_split": "job", "default_out": "job", "ShardAssignment": "job", "Feed": "job",
         "CorruptImageError": "names", "DatasetError": "names", "ImageSplit": "datasets",
         "dataset_splits": "datasets", "open_split": "datasets", "UnsafePickleError": "restricted_pickle",
         "restricted_load": "restricted_pickle"}

__all__ = ["extract", "extract_split", "open_split", "dataset_splits", "default_out", "ImageSplit",
           "ShardAssignment", "Feed", "DatasetError", "CorruptImageError", "UnsafePickleError", "restricted_load"]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
