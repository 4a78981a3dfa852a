"""Load data pickles (the CIFAR python release) without letting the file run code.

``pickle.load`` calls whatever callable the file names, so a crafted "dataset" can run any command. This
unpickler resolves only the handful of globals a NumPy array needs; containers (dict, list, tuple), str, bytes
and numbers are built by the pickle machine itself without any global. Anything else is refused before it is
imported, let alone called.
"""
from __future__ import annotations

import io
import pickle

import numpy as np


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle asked for a global outside the allowed set (it could run code): nothing was executed."""


def _allowed() -> dict[tuple[str, str], object]:
    from numpy._core import multiarray, numeric
    allowed = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
               ("_codecs", "encode"): __import__("codecs").encode}  # bytes pickled by Python 3 at protocol <= 2
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):  # NumPy 1.x and 2.x spellings
        allowed[(mod, "_reconstruct")] = multiarray._reconstruct
        allowed[(mod, "scalar")] = multiarray.scalar
    for mod in ("numpy.core.numeric", "numpy._core.numeric"):  # pickle protocol 5 (buffer) arrays
        allowed[(mod, "_frombuffer")] = numeric._frombuffer
    for mod in ("numpy.dtypes", "numpy"):  # NumPy 2 pickles dtypes through their classes
        for name in ("UInt8DType", "Int64DType", "Int32DType", "Float32DType", "Float64DType", "BoolDType"):
            if hasattr(np.dtypes, name):
                allowed[(mod, name)] = getattr(np.dtypes, name)
    return allowed


class RestrictedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that admits only NumPy arrays, containers, str, bytes and numbers."""

    _ALLOWED = _allowed()

    def find_class(self, module: str, name: str):
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"refusing to load global {module}.{name} from a data pickle: only NumPy arrays, lists, dicts, "
                "str, bytes and numbers are allowed (the file may try to run code)") from None


def restricted_load(file, *, encoding: str = "latin1"):
    """Unpickle ``file`` (a path or a binary file object) with :class:`RestrictedUnpickler`.

    ``encoding="latin1"`` reads Python 2 pickles (the CIFAR release) with str keys, as torchvision does.
    """
    if isinstance(file, str) or hasattr(file, "__fspath__"):
        with open(file, "rb") as f:
            return RestrictedUnpickler(f, encoding=encoding).load()
    if isinstance(file, (bytes, bytearray)):
        file = io.BytesIO(file)
    return RestrictedUnpickler(file, encoding=encoding).load()
