"""A source's rows as the runner reads them (:class:`Rows`): class indices, a mask of null rows, the whole set
loaded once (:meth:`Rows.load`) or padded, sharded device blocks (:meth:`Rows.device_blocks`) read one block ahead
by a background thread (:func:`read_ahead`), through page-locked host buffers on a GPU (:func:`page_locked`).

Rows are sharded over ``jax.devices()`` (and over hosts under ``jax.distributed``, :func:`put_rows`); padding rows
are null rows (mask 0: they change no exact sum).  Rows whose label is not in the public class list, rows with a
non-finite value, and a store's rows skipped at extraction (counted in N) are null rows too: they contribute
nothing (the zero-out relation), and nothing about them is reported.
"""
from __future__ import annotations

import queue
import threading
from typing import Iterator

import jax
import numpy as np

from . import progress, sensitivity
from .data import Source, label_index

__all__ = ["Rows", "TAIL_ROWS", "BLOCK_BYTES", "PAGE_LOCKED", "stream_block_rows", "read_ahead", "put_rows",
           "padded_len", "loaded_len", "page_locked"]

#: A short last block is padded to a multiple of this many rows (not to a full block): a few compiled shapes
#: instead of up to one block of zero rows computed for nothing.  A multiple of CHUNK_ROWS.
TAIL_ROWS = 8192
#: Most bytes of stored rows in one streamed block: ``block_rows`` rows of a 36 864-d float16 store would be
#: 4.8 GB, times the float32 copy on the device; blocks are cut to this size (whole CHUNK_ROWS multiples).
BLOCK_BYTES = 256 << 20
#: Stream a store's blocks through page-locked host buffers when the device is a GPU (see :func:`page_locked`);
#: benchmarks switch it off to measure the ordinary route in the same run.
PAGE_LOCKED = True


def _row_sharding():
    """NamedSharding splitting rows over all devices, or None on a single device."""
    devices = jax.devices()
    if len(devices) == 1:
        return None
    mesh = jax.sharding.Mesh(np.array(devices), ("rows",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("rows"))


def put_rows(*arrays):
    """Device arrays with rows sharded over ``jax.devices()`` (one data-parallel jit; GSPMD inserts the psum).

    ``make_array_from_process_local_data``: under ``jax.distributed`` each process passes its own rows and the
    global array spans all hosts.
    """
    sharding = _row_sharding()
    if sharding is None:
        return tuple(jax.device_put(a, may_alias=False) for a in arrays)  # faster than jnp.asarray on a CPU
    return tuple(jax.make_array_from_process_local_data(sharding, np.asarray(a)) for a in arrays)


def padded_len(n: int) -> int:
    """Rows this process holds once padded: a multiple of its devices (of all devices on one process)."""
    nd = jax.local_device_count() if jax.process_count() > 1 else jax.device_count()
    return -(-n // nd) * nd


def loaded_len(n: int) -> int:
    """Rows the in-memory path holds for ``n`` rows: whole chunks from 4 chunks on (at most a quarter more rows: see
    CHUNK_ROWS); below that the least of 256, 384, 512, 768, ... (2^j and 3·2^(j−1)) that holds them, at most half
    again as many rows (the next power of two alone could double every step's work), and about twice as many
    programs as powers of two.  Fixed shapes: one compiled program serves every small N of a bucket instead of one
    per N; null padding rows change no sum's bits (exact sums over the public N).  A 3·2^(j−1) is skipped where
    :func:`privlin.sensitivity.chunked` would step over it otherwise than over 2^j (3072: one call, 4096: two
    chunks), so that no bucket changes how the rows are chunked.  (The float32 logits are not exact: XLA may round
    them differently for another shape, as between any two buckets.)"""
    if n >= 4 * sensitivity.CHUNK_ROWS:
        return -(-n // sensitivity.CHUNK_ROWS) * sensitivity.CHUNK_ROWS
    power = max(256, 1 << (max(n, 1) - 1).bit_length())
    less = power * 3 // 4
    if power > 256 and n <= less and sensitivity.in_chunks(less) == sensitivity.in_chunks(power):
        return less
    return power


def _pad(X, idx, mask, to: int):
    """Pad a block to ``to`` rows with zero rows of mask 0 (fixed shapes: one compilation)."""
    m = X.shape[0]
    if m < to:
        X = np.concatenate([X, np.zeros((to - m, X.shape[1]), X.dtype)])
        idx = np.concatenate([idx, np.zeros(to - m, idx.dtype)])
        mask = np.concatenate([mask, np.zeros(to - m, mask.dtype)])
    return X, idx, mask


class Rows:
    """A source's rows as the runner consumes them: class indices, a mask of real rows, padded device blocks."""

    def __init__(self, source: Source, classes: np.ndarray, block_rows: int, verbose: bool):
        self.source, self.classes, self.verbose = source, classes, verbose
        self.block_rows = stream_block_rows(int(block_rows), source.dim * source.itemsize)
        self.k = len(classes)

    def host_blocks(self, page_locked: bool = False):
        """``(X, idx int32, mask float32)`` of every row counted in N: null rows (a store's skipped row, unknown
        label, non-finite value) zeroed and masked out."""
        for X, y, valid in self.source.fit_blocks(self.block_rows, page_locked=page_locked):
            idx, known = label_index(self.classes, y)
            if valid is not None:  # a store's skipped row (its features already zero): a null row
                known = known & valid
            if X.dtype not in (np.float16, np.float32):
                X = np.asarray(X, np.float32)
            if not self.source.finite:  # a store's writer refuses NaN/inf: only arrays need the pass
                finite = np.isfinite(X).all(axis=1)
                known = known & finite
                if not finite.all():
                    X = np.where(finite[:, None], X, 0).astype(X.dtype)
            yield X, idx, known.astype(np.float32)  # float16 stays float16 until the device: half the copy

    def load(self):
        """Every row at once: X (m, d), class index (m,), mask (m,), padded with null rows to :func:`loaded_len`
        and a multiple of the device count (under ``jax.distributed``: this process's rows, padded like every
        other process's).  One copy: the blocks are written into place."""
        rows = padded_len(loaded_len(self.source.n_local_max))
        X, idx, mask = None, np.zeros(rows, np.int32), np.zeros(rows, np.float32)
        at = 0
        for Xb, ib, mb in self.host_blocks():
            if X is None:
                X = np.zeros((rows, self.source.dim), Xb.dtype)
            m = Xb.shape[0]
            X[at:at + m], idx[at:at + m], mask[at:at + m] = Xb, ib, mb
            at += m
        if X is None:
            X = np.zeros((rows, self.source.dim), np.float32)
        return put_rows(X, idx, mask)

    def device_blocks(self, desc: str | None, with_counts: bool = False):
        """Padded, sharded device blocks ``(X, idx, mask[, position of the block's first row])``.

        One process: a short last block is padded to TAIL_ROWS multiples, and positions count real rows (so a
        streamed Poisson sample equals the in-memory one).  Several processes: every process yields the same
        number of blocks of the same shape (empty ones where it has no more rows), and positions count the
        global padded stream.
        """
        multi = jax.process_count() > 1
        locked = page_locked()
        count = self.source.block_count(self.block_rows) if multi else None
        size = padded_len(self.source.block_size(self.block_rows)) if multi else None

        def padded():  # (padded host block, its row count)
            nonlocal size
            for X, idx, mask in self._host_blocks_padded_to(count, locked):
                m = X.shape[0]
                if not multi:
                    size = size or padded_len(m)
                to = size if multi or m >= size else min(size, padded_len(-(-m // TAIL_ROWS) * TAIL_ROWS))
                yield _pad(X, idx, mask, to), m

        position = 0
        for host, m in progress.bar(read_ahead(padded()), desc, self.verbose, leave=False):
            block, to = put_rows(*host), host[0].shape[0]
            if locked:  # the copy is an asynchronous DMA from the buffer the reader will reuse: let it finish
                jax.block_until_ready(block)
            yield (*block, position) if with_counts else block
            position += to * jax.process_count() if multi else m

    def _host_blocks_padded_to(self, count, page_locked: bool):
        """Host blocks, then empty ones up to ``count`` (None: as many as there are)."""
        produced = 0
        for block in self.host_blocks(page_locked):
            produced += 1
            yield block
        while count is not None and produced < count:
            produced += 1
            yield (np.zeros((0, self.source.dim), np.float32), np.zeros(0, np.int32), np.zeros(0, np.float32))


def page_locked() -> bool:
    """Whether streamed blocks are read into page-locked host memory: where the default device is a CUDA GPU, which
    copies it by DMA several times faster than ordinary memory (BENCHMARKS.md, "Page-locked blocks").  Off
    where :data:`PAGE_LOCKED` is False or the reader cannot allocate it (then blocks stay in ordinary memory)."""
    if not PAGE_LOCKED or jax.default_backend() != "gpu":
        return False
    from stores import buffers  # privlin imports stores (and zarr) only where a store is read
    return buffers.can_page_lock()


def stream_block_rows(block_rows: int, row_bytes: int) -> int:
    """Rows per streamed block: ``block_rows``, cut so a block holds at most :data:`BLOCK_BYTES` of stored rows
    (a multiple of CHUNK_ROWS, the unit the kernels scan in)."""
    fit = BLOCK_BYTES // max(1, row_bytes) // sensitivity.CHUNK_ROWS * sensitivity.CHUNK_ROWS
    return max(1, min(block_rows, max(sensitivity.CHUNK_ROWS, fit)))


def read_ahead(blocks: Iterator, depth: int = 1) -> Iterator:
    """The items of ``blocks``, produced by a background thread up to ``depth`` ahead of the consumer.

    Reading a store block (its threads checksum and copy) overlaps the device's work on the previous one and
    the host-to-device copy: a pass costs the slower of the two, not their sum.  An exception in the producer
    is raised here; a consumer that stops early stops the producer.
    """
    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce():
        try:
            for item in blocks:
                while not stop.is_set():
                    try:
                        items.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put((done, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            items.put((done, exc))
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="privlin-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, exc = items.get()
            if item is done:
                if exc is not None:
                    raise exc
                return
            yield item
            del item  # let the store reuse the block's buffer once the device is done with it
    finally:
        stop.set()
        while thread.is_alive():  # drain, so a producer blocked on a full queue sees the stop
            try:
                items.get(timeout=0.1)
            except queue.Empty:
                pass
        thread.join()
