"""Where a ledger document lives: a local file, an fsspec URL, or memory.

Local files are replaced atomically (temporary file, fsync, ``os.replace``) under an exclusive ``flock`` on
the folder that holds them (not on a lock file, which a cleanup could delete mid-charge), so concurrent
writers lose no entry and a crash leaves the old or the new file, never half of one.  fsspec URLs are written whole, serialised within this process only.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from typing import Iterator

__all__ = ["backend", "LocalFile", "FsspecFile", "Memory"]

_PROCESS_LOCKS: dict[str, threading.Lock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()


def _process_lock(key: str) -> threading.Lock:
    with _PROCESS_LOCKS_GUARD:
        return _PROCESS_LOCKS.setdefault(key, threading.Lock())


class LocalFile:
    """A JSON file on local disk: flock for writers, os.replace for atomicity."""

    def __init__(self, path: str, timeout: float):
        self.path = os.path.abspath(os.path.expanduser(path))
        self.timeout = timeout

    def read(self) -> dict | None:
        try:
            with open(self.path, "r", encoding="utf-8") as fh:
                return json.load(fh)
        except FileNotFoundError:
            return None
        except json.JSONDecodeError as e:
            raise ValueError(f"privacy ledger {self.path} is not valid JSON ({e})") from None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with _process_lock(self.path):
            fd = os.open(os.path.dirname(self.path), os.O_RDONLY)
            try:
                _flock(fd, self.timeout, self.path)
                yield
            finally:
                os.close(fd)  # closing releases the flock

    def write(self, data: dict) -> None:
        d = os.path.dirname(self.path)
        fd, tmp = tempfile.mkstemp(prefix=".privacy_ledger.", suffix=".tmp", dir=d)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=1, allow_nan=False)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def _flock(fd: int, timeout: float, path: str) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX: in-process lock only
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not lock the privacy ledger {path} within {timeout} s") from None
            time.sleep(0.01)


class FsspecFile:
    """A JSON file behind an fsspec URL; writes are serialised in-process only."""

    def __init__(self, url: str):
        import fsspec

        self.url = url
        self.fs, self.path = fsspec.core.url_to_fs(url)

    def read(self) -> dict | None:
        if not self.fs.exists(self.path):
            return None
        with self.fs.open(self.path, "rb") as fh:
            try:
                return json.loads(fh.read().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ValueError(f"privacy ledger {self.url} is not valid JSON ({e})") from None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with _process_lock(self.url):
            yield

    def write(self, data: dict) -> None:
        blob = json.dumps(data, indent=1, allow_nan=False).encode("utf-8")
        with self.fs.open(self.path, "wb") as fh:
            fh.write(blob)


class Memory:
    """A ledger document held in this process (for arrays)."""

    def __init__(self):
        self.data: dict | None = None
        self.lock = threading.Lock()

    def read(self):
        return self.data

    @contextlib.contextmanager
    def locked(self):
        with self.lock:
            yield

    def write(self, data):
        self.data = json.loads(json.dumps(data))


def canonical(path: str) -> str:
    """One spelling per file: an absolute local path, or the URL fsspec gives back for it."""
    path = os.fspath(path)
    if "://" not in path or path.startswith("file://"):
        return os.path.abspath(os.path.expanduser(path[len("file://"):] if path.startswith("file://") else path))
    import fsspec

    fs, p = fsspec.core.url_to_fs(path)
    return fs.unstrip_protocol(p)


def backend(path: str | None, timeout: float):
    """The storage for ``path``: memory (None), a local file, or an fsspec URL."""
    if path is None:
        return Memory()
    path = os.fspath(path)
    if "://" not in path or path.startswith("file://"):
        return LocalFile(path[len("file://"):] if path.startswith("file://") else path, timeout)
    return FsspecFile(path)
