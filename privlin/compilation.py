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

:func:`call` goes one step further for the fit program (:func:`privlin.in_memory.train_many`): JAX finds a cached
executable only after tracing and lowering the program to compute its key, most of a warm first fit's time; so
privlin also keeps each compiled fit program whole, serialized, in ``programs/`` inside the cache directory, and a
later process loads it without tracing, lowering or compiling (BENCHMARKS.md, "First fit, refit, grid search").

* A program's name is a hash of the program itself and of everything else its code depends on
  (:func:`program_key`: the jaxpr and its constants, the arguments' shapes and dtypes, jax/jaxlib versions, the
  backend, JAX's configuration including x64, ``XLA_FLAGS``, the compile options): a change to privlin that
  changes a program never loads the old one.
* Naming takes tracing, so a small alias file per form (static arguments, shapes, options, versions and a hash of
  privlin's own source files) records the name: an unchanged privlin skips the tracing too; after any edit the
  program is traced and named again (and found again where the edit left it unchanged).
* A program file holds its name and a checksum of its content; a corrupt, truncated or foreign file, or a
  program that loads but fails to run, is rebuilt and replaced (counted in :data:`STATS`), never trusted.  Files
  are written whole and renamed into place: concurrent processes writing one entry are safe.
* Off with the cache (:data:`ENV`); CPU, single-device runs only.

Small programs compile with XLA's quick options (:data:`QUICK_OPTIONS`, up to
:data:`privlin.defaults.QUICK_COMPILE_ELEMENTS`): compile time is what a first small fit waits for.
"""
from __future__ import annotations

import collections
import hashlib
import os
import pickle
import threading
import zlib
from pathlib import Path

from . import defaults

__all__ = ["ENV", "QUICK_OPTIONS", "STATS", "enable", "cache_dir", "default_dir", "programs_dir", "program_key",
           "compile_options", "call"]

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


# ----------------------------------------------------------------------------- compiled programs, stored whole

#: XLA's quick CPU compile (LLVM at -O0, the loop emitters instead of the fusion emitters): the same HLO, a few
#: times less compile time for a slower run (BENCHMARKS.md, "XLA's quick compile options for small fits"); the
#: last bits of a result may differ from the default compile's, so a program's options are part of its name.
#: The fusion-emitter switch exists on jaxlib 0.10 only (an unknown option is an error): see
#: :func:`compile_options`.
QUICK_OPTIONS = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
#: How many programs this process built (compiled), loaded from ``programs/``, and rebuilt because a stored file
#: was unreadable (corrupt, truncated, another format): what the tests and the benchmark count.
STATS: collections.Counter = collections.Counter()
#: First line of a stored program; then its key (64 hex digits: a file renamed or copied under another key is
#: refused), the sha256 of key and payload, and the payload: the pickled (executable, in_tree, out_tree),
#: zlib-compressed (a fifth of the size).
_MAGIC = b"privlin-program-2\n"
#: First line of a form's alias (``form-*`` in ``programs/``); then the name of its program.
_ALIAS = b"privlin-form-1\n"
_source_hash: str | None = None
_programs: dict[tuple, object] = {}  # this process's loaded or built programs, by form (see call)
_programs_lock = threading.Lock()
_listening = False


def programs_dir() -> Path | None:
    """``programs/`` inside JAX's cache directory in use, where :func:`call` keeps compiled programs; None where
    privlin's cache is off (:data:`ENV`), JAX's cache is off, the backend is not a CPU (measured and tested on CPUs
    only; JAX's cache still serves other backends), or the run spans several devices or processes (a stored
    executable is placed on one device)."""
    import jax

    where = cache_dir()
    if (where is None or os.environ.get(ENV, "").strip().lower() in _OFF or jax.default_backend() != "cpu"
            or jax.process_count() > 1 or jax.device_count() > 1):
        return None
    return Path(where) / "programs"


def compile_options(args) -> dict:
    """The XLA options a program of these arguments compiles with: :data:`QUICK_OPTIONS` on a CPU where its array
    arguments hold at most :data:`privlin.defaults.QUICK_COMPILE_ELEMENTS` elements (public: shapes only), and
    where ``XLA_FLAGS`` does not set them itself; else none (XLA's defaults)."""
    import jax
    import jaxlib

    if jax.default_backend() != "cpu":
        return {}
    size = sum(int(getattr(a, "size", 1)) for a in jax.tree.leaves(args))
    if size > defaults.QUICK_COMPILE_ELEMENTS:
        return {}
    flags = os.environ.get("XLA_FLAGS", "")
    options = {k: v for k, v in QUICK_OPTIONS.items() if f"--{k}" not in flags}
    if tuple(jaxlib.__version__.split(".")[:2]) != ("0", "10"):
        options.pop("xla_cpu_use_fusion_emitters", None)
    return options


def program_key(traced, options: dict) -> str:
    """The name of a traced program's stored file: a sha256 of everything its compiled code depends on — the
    program itself (its jaxpr and constants: a change to privlin that changes the program changes the name, one
    that does not keeps it), its arguments' shapes, dtypes and pytree structure, the compile options, jax/jaxlib
    versions, the backend, JAX's configuration (x64 included) and ``XLA_FLAGS``; never a traced argument's value
    (rows, keys and σ's are arguments, not constants)."""
    import jax
    import jaxlib
    import numpy as np

    consts = hashlib.sha256()
    for c in traced.jaxpr.consts:
        c = np.asarray(c)
        consts.update(f"{c.dtype}{c.shape}".encode() + c.tobytes())
    device = jax.devices()[0]
    parts = (
        _MAGIC, traced.fun_name, str(traced.jaxpr), consts.hexdigest(), str(traced.in_tree), str(traced.out_tree),
        str(traced.in_avals), repr(sorted(options.items())), jax.__version__, jaxlib.__version__, device.platform,
        device.device_kind, device.client.platform_version, os.environ.get("XLA_FLAGS", ""),
        repr(sorted(jax.config.values.items())),
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def call(fn, static_args: tuple, *args, on_phase=None, **static_kwargs):
    """``fn(*static_args, *args, **static_kwargs)`` through its compiled program, stored once per form.

    Parameters
    ----------
    fn : a ``jax.jit`` function
        Whose static arguments are the leading positional ones (``static_args``) and every keyword argument.
    args
        Its traced arguments (arrays, scalars, pytrees of them).
    on_phase : callable, optional
        Told what happens as it happens: ``"loading"`` (a stored program is read), ``"tracing"``, ``"compiling"``
        (only while XLA compiles), ``"running"`` — what :class:`privlin.progress.Fits` shows.

    The program is this process's (a later call of the same form: nothing traced), else the stored one of
    :func:`programs_dir` (loaded: not lowered, not compiled; found through the form's alias, or, after an edit of
    privlin, traced to find its name), else built — lowered and compiled with :func:`compile_options` — and
    stored.  Without a program directory it is built once per process (JAX's persistent cache may serve the
    compile).  A stored file that cannot be read back as the program it names, or that loads but fails to run, is
    rebuilt and replaced."""
    import jax

    global _listening
    if not _listening:
        jax.monitoring.register_event_listener(_listen)
        _listening = True
    on_phase = on_phase or _no_phase
    options = compile_options(args)
    leaves, tree = jax.tree.flatten(args)
    form = (fn, static_args, tuple(sorted(static_kwargs.items())), str(tree), tuple(str(jax.typeof(a)) for a in leaves),
            tuple(sorted(options.items())), os.environ.get("XLA_FLAGS", ""), repr(sorted(jax.config.values.items())))
    with _programs_lock:
        program, loaded, path = _programs.get(form), False, None
        if program is None:
            program, loaded, path = _obtain(fn, static_args, args, static_kwargs, options, form, on_phase)
            _programs[form] = program
    on_phase("running")
    out = program(*args)
    if loaded:  # a stored program that loads but cannot run (e.g. a kernel it calls is missing) is rebuilt
        try:
            jax.block_until_ready(out)
        except jax.errors.JaxRuntimeError:
            STATS["rebuilt"] += 1
            with _programs_lock:
                on_phase("tracing")
                traced = fn.trace(*static_args, *args, **static_kwargs)
                program = _programs[form] = _build(traced, options, path, on_phase)
            on_phase("running")
            out = program(*args)
    return out


def _no_phase(what: str) -> None:
    """:func:`call`'s ``on_phase`` when none is given."""


def _obtain(fn, static_args, args, static_kwargs, options, form, on_phase):
    """(program, loaded from ``programs/``?, its path or None) for a form this process has not run yet.

    The form's alias (named by the form and privlin's source: :func:`_form_name`) gives the program's name without
    tracing; else the program is traced and named by :func:`program_key` (an edit of privlin that leaves the
    program unchanged finds it again), loaded, or built and stored; the alias is then written."""
    where = programs_dir()
    if where is None:
        on_phase("tracing")
        return _build(fn.trace(*static_args, *args, **static_kwargs), options, None, on_phase), False, None
    alias = where / f"form-{_form_name(fn, form)}"
    named, path = _read_alias(alias), None
    if named is not None:
        path = where / named
        on_phase("loading")
        program = _load(path)
        if program is not None:
            return program, True, path
    on_phase("tracing")
    traced = fn.trace(*static_args, *args, **static_kwargs)
    damaged, path = path, where / program_key(traced, options)
    if path != damaged and path.exists():  # a damaged file was counted once
        on_phase("loading")
    program = _load(path) if path != damaged else None
    loaded = program is not None
    if program is None:
        program = _build(traced, options, path, on_phase)
    _write(alias, _ALIAS + path.name.encode())
    return program, loaded, path


def _form_name(fn, form) -> str:
    """Name of a form's alias: a sha256 of the form (the function, its static arguments, the arguments' shapes and
    dtypes, the options, ``XLA_FLAGS``, JAX's configuration), the versions of jax, jaxlib and numpy, the backend,
    and privlin's own source files (any edit of privlin: the alias is not used, the program is traced)."""
    import jax
    import jaxlib
    import numpy as np

    device = jax.devices()[0]
    parts = (_ALIAS, f"{fn.__module__}.{getattr(fn, '__qualname__', fn)}", repr(form[1:]), jax.__version__,
             jaxlib.__version__, np.__version__, device.platform, device.device_kind, device.client.platform_version,
             _privlin_source())
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _privlin_source() -> str:
    """sha256 of privlin's own source files (names and bytes), once per process."""
    global _source_hash
    if _source_hash is None:
        h = hashlib.sha256()
        root = Path(__file__).resolve().parent
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
        _source_hash = h.hexdigest()
    return _source_hash


def _read_alias(path: Path) -> str | None:
    """The program name an alias holds, or None (no alias, or not one: then the program is traced and named)."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    name = blob[len(_ALIAS):]
    if not blob.startswith(_ALIAS) or len(name) != 64 or not all(c in b"0123456789abcdef" for c in name):
        return None
    return name.decode()


def _build(traced, options, path, on_phase=_no_phase):
    """Lower and compile a traced program; store it at ``path`` (None: not stored).

    Only an executable compiled here can be stored: XLA's CPU client serializes one that JAX's persistent cache
    loaded without the code of its fused kernels (it then fails when run: "Function ... not found"), and JAX's
    in-memory cache may hand back such a one.  So where JAX reported no compile (no cache miss in this thread), the
    program is compiled once more to be stored, with an inert option (:data:`_FRESH`, a GPU-only path) set to a
    random value so that neither cache can serve it; this happens only where JAX's cache already held the program
    but ``programs/`` did not (a damaged file; programs compiled before ``programs/`` existed)."""
    import jax

    lowered = traced.lower()
    on_phase("compiling")
    _watch.misses = 0
    _watch.on = True
    try:
        program = lowered.compile(compiler_options=options or None)
    except jax.errors.JaxRuntimeError as e:
        if not options or "No such compile option" not in str(e):
            raise
        options = {}  # an XLA without the quick options: its defaults (the program is the same)
        program = lowered.compile()
    finally:
        _watch.on = False
    STATS["built"] += 1
    if path is not None:
        fresh = program
        if not _watch.misses:  # not compiled here: JAX's persistent cache or its in-memory one served it
            fresh = lowered.compile(compiler_options={**options, _FRESH: _fresh_value()})
        _store(path, fresh)
    return program


#: The inert compile option :func:`_build` varies to miss JAX's cache: a GPU autotuning dump path, which JAX hashes
#: into its cache key and XLA's CPU compiler never reads (``programs/`` is used on CPUs only).
_FRESH = "xla_gpu_dump_autotune_results_to"
_watch = threading.local()


def _fresh_value() -> str:
    """A value of :data:`_FRESH` JAX's cache has not seen (random; no key or secret: it only names a path never
    written)."""
    return f"privlin-{os.urandom(16).hex()}"


def _listen(event: str, **kwargs) -> None:
    """Count JAX's persistent-cache misses (a compile that ran) of this thread while :func:`_build` compiles."""
    if event == "/jax/compilation_cache/cache_misses" and getattr(_watch, "on", False):
        _watch.misses += 1


def _load(path: Path):
    """The program stored at ``path``, or None where there is none or it is unreadable (then counted as rebuilt)."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        STATS["rebuilt"] += 1
        return None
    try:
        payload = _unpack(blob, path.name)
        from jax._src.lax import linalg
        from jax.experimental import serialize_executable

        # the LAPACK kernels a program may call are registered when a program using them is lowered; a loaded
        # one skips lowering, so register them first (an executable calling an unregistered kernel crashes)
        linalg.initialize_lapack()
        executable, in_tree, out_tree = pickle.loads(payload)
        program = serialize_executable.deserialize_and_load(executable, in_tree, out_tree)
    except Exception:  # noqa: BLE001 - anything unreadable is rebuilt (and the file replaced), never trusted
        STATS["rebuilt"] += 1
        return None
    STATS["loaded"] += 1
    return program


def _unpack(blob: bytes, name: str) -> bytes:
    """The pickled payload of a program file named ``name``; ValueError where it is not one, is another program's,
    or is damaged."""
    n = len(_MAGIC)
    head, key, digest, packed = blob[:n], blob[n:n + 64], blob[n + 64:n + 96], blob[n + 96:]
    if head != _MAGIC or key != name.encode() or hashlib.sha256(key + packed).digest() != digest:
        raise ValueError("not a privlin program, another program's, or damaged")
    return zlib.decompress(packed)


def _store(path: Path, program) -> None:
    """Write ``program`` to ``path`` whole: a temporary file renamed into place, so a reader never sees half a file
    and concurrent writers of one entry leave one complete copy.  A program that cannot be serialized, or a
    directory that cannot be written, stores nothing (the next process builds it again)."""
    from jax.experimental import serialize_executable

    try:
        packed = zlib.compress(pickle.dumps(serialize_executable.serialize(program)), 1)
    except Exception:  # noqa: BLE001 - e.g. "Compilation does not support serialization": not stored
        return
    key = path.name.encode()
    _write(path, _MAGIC + key + hashlib.sha256(key + packed).digest() + packed)


def _write(path: Path, blob: bytes) -> None:
    """``blob`` at ``path``, whole: a temporary file renamed into place; nothing where the directory cannot be
    written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
