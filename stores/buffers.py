"""Memory and threads the readers share: block buffers that are reused, and the reading threads.

Fresh memory costs a page fault per 4 KiB on first touch, which makes a copy much slower than into memory
already mapped (BENCHMARKS.md); so a split reuses its block buffers, but only once nobody else holds a reference.
"""
from __future__ import annotations

import functools
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np


class Recycler:
    """Block buffers handed out again once nobody else references them (checked with the reference count).

    ``allocate(nbytes)`` makes a new uint8 buffer: :func:`pageable` (default) or :func:`page_locked`.
    """

    KEEP = 4  # two blocks on the device, one read ahead (privlin streams so), plus the one being read

    def __init__(self, allocate=None):
        self._bufs: list[np.ndarray] = []
        self._allocate = allocate or pageable

    def take(self, shape, dtype) -> np.ndarray:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        for i in range(len(self._bufs)):
            if sys.getrefcount(self._bufs[i]) == IDLE_REFS and self._bufs[i].nbytes >= nbytes:
                return self._bufs[i][:nbytes].view(dtype).reshape(shape)
        buf = self._allocate(max(nbytes, 1))
        if len(self._bufs) < self.KEEP:
            self._bufs.append(buf)
        return buf[:nbytes].view(dtype).reshape(shape)


def pageable(nbytes: int) -> np.ndarray:
    """Ordinary host memory."""
    return np.empty(nbytes, dtype=np.uint8)


def page_locked(nbytes: int) -> np.ndarray:
    """Page-locked (pinned) host memory, for blocks bound for a CUDA device: the GPU copies it by DMA, several times
    faster than from pageable memory, which the driver stages through its own pinned buffer (BENCHMARKS.md,
    ``benchmarks/investigations/diag_h2d.py``).  From torch's pinned allocator; the array keeps its tensor alive."""
    if not can_page_lock():
        raise RuntimeError("page-locked buffers need a CUDA device (torch.cuda.is_available() is False)")
    import torch
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy()


@functools.cache
def can_page_lock() -> bool:
    """Whether :func:`page_locked` can allocate: torch, whose pinned allocator it uses, sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _idle_refcount() -> int:
    """The count ``take`` sees for a buffer only its list holds (same expression, so same temporaries)."""
    bufs = [np.empty(1, dtype=np.uint8)]
    i = 0
    return sys.getrefcount(bufs[i])


IDLE_REFS = _idle_refcount()
_POOL = None


def io_pool() -> ThreadPoolExecutor:
    """Threads that read and checksum shards (both release the GIL), shared by every split."""
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2)), thread_name_prefix="stores-io")
    return _POOL


def _forget_pool() -> None:
    global _POOL
    _POOL = None  # a forked child (a DataLoader worker) has none of the parent's threads


os.register_at_fork(after_in_child=_forget_pool)
