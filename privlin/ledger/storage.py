"""Where a ledger document lives: a local file, an S3 object, another fsspec URL, or memory.

Local files are replaced atomically (temporary file, fsync, ``os.replace``) under an exclusive ``flock`` on
the folder that holds them (not on a lock file, which a cleanup could delete mid-charge), so concurrent
writers lose no entry and a crash leaves the old or the new file, never half of one.

``s3://`` ledgers (:class:`S3Object`) are serialised across processes and machines by S3's conditional writes: a
writer holds a lease object ``<ledger>.lock`` created with ``If-None-Match: *`` (only one create succeeds), and
writes the ledger with ``If-Match`` on the ETag it read, so even a writer whose lease was broken cannot overwrite a
newer ledger (it fails, one line, writing nothing).  A lease left by a killed process is broken after
``S3Object.STALE_AFTER`` seconds; until then other writers wait ``lock_timeout`` seconds, then refuse with an error
naming the lease.  Other fsspec URLs are written whole, serialised within this process only.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from typing import Iterator

__all__ = ["backend", "LocalFile", "FsspecFile", "S3Object", "LedgerConflict", "Memory"]

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


class LedgerConflict(RuntimeError):
    """The ledger object changed between this writer's read and its write (its lease was broken): nothing written."""


class S3Object:
    """A JSON ledger in S3: a lease object for writers (``If-None-Match: *``), ``If-Match`` writes of the ledger."""

    #: Seconds after which a lease is taken to be a killed writer's and broken (a charge holds it for milliseconds).
    STALE_AFTER = 600.0

    def __init__(self, url: str, timeout: float):
        import fsspec

        self.url, self.timeout = url, timeout
        self.fs, path = fsspec.core.url_to_fs(url)
        self.bucket, self.key = path.split("/", 1)
        self.lease_key = self.key + ".lock"
        self._etag: str | None = None  # of the document last read; None: absent

    def _s3(self, method: str, **kwargs):
        from fsspec.asyn import sync

        return sync(self.fs.loop, self.fs._call_s3, method, Bucket=self.bucket, **kwargs)

    def _get(self, key: str) -> tuple[bytes | None, str | None, float]:
        """The object's bytes, ETag and age in seconds (None, None, 0 when absent), in one request (no cache)."""
        import datetime as dt

        from fsspec.asyn import sync

        async def get():
            try:
                resp = await self.fs._call_s3("get_object", Bucket=self.bucket, Key=key)
            except FileNotFoundError:
                return None, None, 0.0
            body = await resp["Body"].read()
            age = (dt.datetime.now(dt.timezone.utc) - resp["LastModified"]).total_seconds()
            return body, resp["ETag"], age
        return sync(self.fs.loop, get)

    def read(self) -> dict | None:
        raw, self._etag, _ = self._get(self.key)
        if raw is None:
            return None
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"privacy ledger {self.url} is not valid JSON ({e})") from None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with _process_lock(self.url):
            etag = self._take_lease()
            try:
                yield
            finally:
                with contextlib.suppress(OSError):  # a broken (taken-over) lease is no longer ours to delete
                    self._s3("delete_object", Key=self.lease_key, IfMatch=etag)

    def _take_lease(self) -> str:
        import uuid

        body = json.dumps({"owner": uuid.uuid4().hex, "since": time.time()}).encode()
        deadline, wait = time.monotonic() + self.timeout, 0.01
        while True:
            try:
                return self._s3("put_object", Key=self.lease_key, Body=body, IfNoneMatch="*")["ETag"]
            except FileExistsError:  # another writer holds it
                pass
            _, etag, age = self._get(self.lease_key)
            if etag is not None and age > self.STALE_AFTER:  # a killed writer's: break exactly that lease
                with contextlib.suppress(OSError):
                    self._s3("delete_object", Key=self.lease_key, IfMatch=etag)
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not lock the privacy ledger {self.url} within {self.timeout:g} s: another "
                                   f"writer holds s3://{self.bucket}/{self.lease_key} (held {age:.0f} s; broken after "
                                   f"{self.STALE_AFTER:g} s, or delete it if no process is charging)") from None
            time.sleep(wait)
            wait = min(2 * wait, 0.5)

    def write(self, data: dict) -> None:
        blob = json.dumps(data, indent=1, allow_nan=False).encode("utf-8")
        cond = {"IfMatch": self._etag} if self._etag else {"IfNoneMatch": "*"}
        try:
            self._etag = self._s3("put_object", Key=self.key, Body=blob, **cond)["ETag"]
        except (FileExistsError, OSError) as e:
            code = getattr(getattr(e, "__cause__", None), "response", {}).get("Error", {}).get("Code", "")
            if isinstance(e, FileExistsError) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise LedgerConflict(f"privacy ledger {self.url} changed since this writer read it (its lease "
                                     f"{self.lease_key} was broken or deleted): nothing was written") from None
            raise
        self.fs.invalidate_cache(self.url)


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
    """The storage for ``path``: memory (None), a local file, an S3 object, or another fsspec URL."""
    if path is None:
        return Memory()
    path = os.fspath(path)
    if "://" not in path or path.startswith("file://"):
        return LocalFile(path[len("file://"):] if path.startswith("file://") else path, timeout)
    if path.startswith(("s3://", "s3a://")):
        return S3Object(path, timeout)
    return FsspecFile(path)
