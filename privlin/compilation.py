"""JAX's persistent compilation cache, on by default: a second process starts warm.

A fit's compiled programs depend only on what must be static (bucketed shapes, the method, which releases are
made: :meth:`privlin.plan.Plan.static`); JAX can keep them on disk, so only the first fit of a form on a machine
pays XLA's compile and later processes load it (BENCHMARKS.md, "First fit, refit, grid search").

:func:`enable` turns the cache on once, before privlin's first compile (:func:`privlin.runner.run` calls it):

* in ``$XDG_CACHE_HOME/privlin/jax`` (else ``~/.cache/privlin/jax``), caching every program however small or
  quick to compile (JAX's defaults skip those under a second, and a fit is many small programs);
* never where the user configured JAX's cache: a ``jax_compilation_cache_dir`` already set
  (``JAX_COMPILATION_CACHE_DIR`` or ``jax.config.update``) is left alone, with its thresholds;
* off with ``PRIVLIN_COMPILATION_CACHE=0`` (or ``false``/``off``/``no``).

What the cache holds is compiled code, keyed by the program: privlin passes rows, keys, σ's and released values as
arguments of its programs, never as constants folded into them, so no data value, key or noise is written there
(``tests/test_compilation.py`` searches the cache for a fit's key and rows).  Like any JAX cache it is trusted
code: keep it in a directory only you can write.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["ENV", "enable", "cache_dir", "default_dir"]

#: The environment variable that turns the cache off (``0``, ``false``, ``off``, ``no``).
ENV = "PRIVLIN_COMPILATION_CACHE"
_OFF = {"0", "false", "off", "no"}
_lock = threading.Lock()
_done = False


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/privlin/jax``, else ``~/.cache/privlin/jax``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "privlin" / "jax"


def enable() -> str | None:
    """Turn JAX's persistent compilation cache on in :func:`default_dir` unless the user configured one or turned
    it off (:data:`ENV`); idempotent and cheap after the first call.  Returns the directory JAX caches in (None:
    no cache)."""
    global _done
    import jax

    with _lock:
        if not _done:
            _done = True
            if os.environ.get(ENV, "").strip().lower() not in _OFF and not jax.config.jax_compilation_cache_dir:
                where = default_dir()
                try:
                    where.mkdir(parents=True, exist_ok=True)
                except OSError:  # a read-only home: compile every process, as without the cache
                    return None
                jax.config.update("jax_compilation_cache_dir", str(where))
                if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
                    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
                if "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES" not in os.environ:
                    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return cache_dir()


def cache_dir() -> str | None:
    """The directory JAX's persistent cache uses now (None: none)."""
    import jax

    if not jax.config.jax_enable_compilation_cache:
        return None
    return jax.config.jax_compilation_cache_dir or None
