"""Frozen-backbone feature extraction into feature stores (``featurize`` on the command line).

::

    import featurize
    featurize.extract("vip_toy", "digits", out="feats.zarr")          # every split, resumable
    featurize.open_split("cifar10", "test", data_dir="/data").labels  # the rows a store will hold
"""
from .datasets import DatasetError, ImageSplit, dataset_splits, open_split
from .job import CorruptImageError, ShardAssignment, default_out, extract, extract_split
from .restricted_pickle import UnsafePickleError, restricted_load

__all__ = ["extract", "extract_split", "open_split", "dataset_splits", "default_out", "ImageSplit",
           "ShardAssignment", "DatasetError", "CorruptImageError", "UnsafePickleError", "restricted_load"]
