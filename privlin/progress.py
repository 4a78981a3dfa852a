"""A sign of life on anything long: what privlin's fits and sweeps show while they work.

``privlin.fit`` and ``privlin.sweep`` show progress by default (``progress=False`` quiets them; the estimator's
``verbose`` is the same switch and stays off by default, as scikit-learn's are); nothing is shown for work done
within :func:`after` seconds.  Stages without a bar of their own (reading rows into memory, evaluating) are one
line each through the command-line convention's :func:`cliconv.status`; the in-memory fits are one line with the
settings done, an estimate of the time left and what runs now (:class:`Fits`); passes over a store and
training steps are tqdm bars that appear once they have run as long.  Lines name stages, counts and times, never
data values.

``PRIVLIN_PROGRESS_AFTER`` (seconds) sets the threshold (``0``: show everything).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import warnings

__all__ = ["AFTER_ENV", "LOG_EVERY", "after", "stage", "bar", "Fits"]

#: Environment variable: seconds a stage runs before it is shown.
AFTER_ENV = "PRIVLIN_PROGRESS_AFTER"
_AFTER = 2.0  # cliconv.status's own default: the same "few seconds" as every command line


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


class Fits:
    """The one line of a run's in-memory fits: settings done of the total (a fraction), an estimate of the time
    left, and what runs now — ``compiling`` only while XLA compiles a program, ``loading`` while a stored one is
    read, ``tracing`` while JAX traces one, ``running`` else.

    The runner calls :meth:`phase` and :meth:`done` as each program (a group or a chunk of a group's settings) is
    prepared and run; the estimate is the measured run time per unit of estimated work (the runner's
    :func:`~privlin.fit_groups.setting_work`) times the work left, less the time the program running now has run
    (so it counts down between settings; compiles are not counted: their time cannot be told in advance).  Shown
    once the fits have run :func:`after` seconds; on a terminal the line is redrawn every second (its clock moves),
    in a log a line is printed at each change and at least every :data:`LOG_EVERY` seconds.  Lines name counts,
    stages and times, never data values."""

    def __init__(self, total: int, rows: int, enabled: bool, work: float = 0.0):
        self.total, self.rows, self.enabled, self.work = total, rows, enabled, work
        self.finished, self.run_s, self.worked, self.now = 0, 0.0, 0.0, "preparing"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._t0 = self._since = time.perf_counter()
        self._last = self._bar = None  # the last line shown; the terminal's line
        self._print_lock = threading.Lock()
        self._printed, self._pending = 0.0, False

    def __enter__(self):
        if self.enabled:
            self._thread = threading.Thread(target=self._watch, name="privlin-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._print_lock:
            if self._last is not None:  # shown: the closing line, with the total time
                self._print(f"{self._head()}: {time.perf_counter() - self._t0:.1f} s", final=True)

    def phase(self, what: str) -> None:
        """What runs now (``compiling``, ``loading``, ``tracing``, ``running``)."""
        with self._lock:
            self.now, self._since = what, time.perf_counter()
        self._show(changed=True)

    def done(self, settings: int, run_seconds: float, work: float = 0.0) -> None:
        """``settings`` more finished; their program ran ``run_seconds`` (its compile excluded) for ``work`` of the
        total estimated work (the estimate: seconds per unit of work so far times the work left; without work
        estimates, per setting)."""
        with self._lock:
            self.finished += settings
            self.run_s += run_seconds
            self.worked += work
        self._show(changed=True)

    def _head(self) -> str:
        what = "the fit" if self.total == 1 else f"{self.total} settings"
        return f"privlin: {what} on {self.rows} rows"

    def line(self) -> str:
        """The line as it reads now."""
        with self._lock:
            done, run_s, worked, now, since = self.finished, self.run_s, self.worked, self.now, self._since
        left = "estimate after the first settings run"
        if done:
            rest = run_s / worked * (self.work - worked) if worked and self.work else run_s / done * (self.total - done)
            if now == "running":  # the program running now has been at it since: the estimate counts down
                rest = max(0.0, rest - (time.perf_counter() - since))
            left = f"~{_duration(rest)} left"
        now = "compiling (first fit of this form only)" if now == "compiling" else now
        return (f"{self._head()}: {done}/{self.total} done ({100 * done // self.total}%), {left}; {now} "
                f"{time.perf_counter() - since:.0f} s")

    def _watch(self):
        """Show the line once the fits have run :func:`after` seconds, then keep it moving (each second)."""
        if self._stop.wait(after()):
            return
        self._show(changed=True, first=True)
        while not self._stop.wait(1.0):
            self._show(changed=False)

    def _show(self, changed: bool, first: bool = False) -> None:
        """Print the line where it is due: once shown, on a terminal at each change and each second; in a log at a
        change (at most one per ``min(after(), 2)`` seconds, a later one catches up) and every :data:`LOG_EVERY`
        seconds."""
        with self._print_lock:
            if self._stop.is_set() or (self._last is None and not first):
                self._pending = self._pending or changed
                return
            self._pending = self._pending or changed
            quiet = time.perf_counter() - self._printed
            if (first or sys.stderr.isatty() or (self._pending and quiet >= min(after(), 2.0))
                    or quiet >= LOG_EVERY):
                self._print(self.line())
                self._printed, self._pending = time.perf_counter(), False

    def _print(self, text: str, final: bool = False):
        """A log's line; on a terminal a tqdm line redrawn in place (tqdm nests it with the caller's own lines and
        bars), closed before the final line."""
        if sys.stderr.isatty() and self._bar is None and not final:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=None, desc=text, bar_format="{desc}", file=sys.stderr, leave=False)
        elif self._bar is not None and not final:
            self._bar.set_description_str(text)
        else:
            if self._bar is not None:
                self._bar.close()
            print(text, file=sys.stderr, flush=True)
        self._last = text


#: Seconds between a log's lines of :class:`Fits` when nothing changed (on a terminal the line moves each second).
LOG_EVERY = 10.0


def _duration(seconds: float) -> str:
    """``12 s``, ``3 min``, ``1.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
