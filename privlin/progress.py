"""A sign of life on anything long (issue 37.2): what privlin's fits and sweeps show while they work.

``privlin.fit`` and ``privlin.sweep`` show progress by default (``progress=False`` quiets them; the estimator's
``verbose`` is the same switch and stays off by default, as scikit-learn's are); nothing is shown for work done
within :func:`after` seconds.  Stages without a bar of their own (compiling and fitting in memory, evaluating)
are one line each through the command-line convention's :func:`cliconv.status`; passes over a store and
training steps are tqdm bars that appear once they have run as long.  Lines name stages, counts and times, never
data values.

``PRIVLIN_PROGRESS_AFTER`` (seconds) sets the threshold (``0``: show everything).
"""
from __future__ import annotations

import contextlib
import os
import warnings

__all__ = ["AFTER_ENV", "after", "stage", "bar", "in_memory"]

#: Environment variable: seconds a stage runs before it is shown.
AFTER_ENV = "PRIVLIN_PROGRESS_AFTER"
_AFTER = 2.0  # cliconv.status's own default: the same "few seconds" as every command line
_programs: set = set()  # the in-memory fit programs this process has run (compiled or loaded from the cache)


def after() -> float:
    """Seconds a stage runs before it is shown (:data:`AFTER_ENV`, else 2).  A value that is not a number is
    warned about and the default used: it is read while a fit runs, after its charge, where no error may stop it."""
    try:
        return max(0.0, float(os.environ.get(AFTER_ENV, _AFTER)))
    except ValueError:
        warnings.warn(f"{AFTER_ENV} must be a number of seconds, not {os.environ[AFTER_ENV]!r}: using {_AFTER:g}",
                      RuntimeWarning, stacklevel=2)
        return _AFTER


def stage(desc: str, enabled: bool):
    """A context showing ``privlin: desc`` (stderr) once it has run :func:`after` seconds, and its time at the end;
    nothing when not ``enabled`` (the command-line convention is imported only then)."""
    if not enabled:
        return contextlib.nullcontext()
    import cliconv

    return cliconv.status(f"privlin: {desc}", after=after())


def bar(iterable, desc: str | None, enabled: bool, **kwargs):
    """``tqdm(iterable)`` shown after :func:`after` seconds (never when not ``enabled`` or ``desc`` is None)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=None if desc is None else f"privlin: {desc}", disable=not enabled or desc is None,
                delay=after(), **kwargs)


def in_memory(program, settings, total: int, rows: int) -> str:
    """The line of one vmapped group of the in-memory path: whether it compiles (the first time this process runs
    ``program``, the hashable form it is compiled for; loaded from the persistent cache where it is warm), which
    of the ``total`` settings it runs (indices ``settings``), on how many rows."""
    first = program not in _programs
    _programs.add(program)
    which = f"settings {settings[0] + 1}-{settings[-1] + 1} of {total}" if total > 1 else "the fit"
    return f"{'compiling (first fit of this form only) and running' if first else 'running'} {which} on {rows} rows"
