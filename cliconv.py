"""The command-line convention of every entry point: help with defaults, limits as data, one-line errors, progress.

Why a module of its own: ``featurize``, ``python -m stores``, ``privlin.audit``, ``privlin.ledger``,
``experiments.*`` and ``backbones.mae.train`` must behave alike, and none of those packages may import the others
for it (DESIGN.md, "Who imports whom").  It imports only argparse and the standard library at import time (tqdm
when a progress line is shown), so ``--help`` answers before any heavy import: entry points parse their arguments
first and import NumPy, zarr, JAX or torch after.

The convention
--------------
1. :func:`parser` — argparse whose ``--help`` shows every default (not ``None``/``False``: their help says what
   happens) and every limit; a usage error is one line ``PROG: error: ... (see PROG --help)``, exit 2.
2. Limits are data: ``type=Interval(float, 0, 1, closed="neither")`` is checked when the line is parsed, before
   any work, and printed in ``--help``; :func:`output_folder` refuses an output path that is a file.
3. :func:`entry_point` — a user mistake (:class:`UserError`, an exception type the entry point lists, a usage
   error) ends in one line on stderr and a non-zero exit, never a traceback; anything else is a bug and keeps
   its traceback.  ``PRIVLIN_TRACEBACK=1`` shows the traceback of a user error too.  ``main(argv)`` returns its
   exit code (tests call it in-process; argparse's usage errors and ``--help`` raise ``SystemExit``).  Validate
   and check everything that can fail *before* charging a privacy ledger or writing a file: a failure changes
   nothing.
4. Output piped into a program that stops reading (``| head -1``) ends quietly: no ``BrokenPipeError``.
5. :func:`status` — progress on anything that takes more than a few seconds and has no bar of its own.  It shows
   what runs and for how long, never data values.

Exit codes: 0 done; 1 the command ran and found a problem (a damaged store, no ledger); 2 a user mistake;
3 an audit found a violated claim; 130 interrupted.

Adopting it (``backbones/mae/train.py``: five lines)::

    import cliconv as cli                                                        # 1
    p = cli.parser("python -m backbones.mae.train", __doc__)                     # 2: was argparse.ArgumentParser
    p.add_argument("--epsilon", type=cli.Interval(float, 0, math.inf, closed="neither"), default=8.0)  # 3
    @cli.entry_point("python -m backbones.mae.train", (ValueError, OSError))     # 4: above def main(argv=None)
    with cli.status("calibrating σ", enabled=not args.no_progress): ...           # 5: slow steps without a bar
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import math
import os
import sys
import threading
import time
from numbers import Real
from typing import Callable, Iterator, Sequence

__all__ = ["UserError", "Interval", "output_folder", "parser", "entry_point", "status", "one_line"]

#: Set to 1 to see the traceback of a user error (for a bug report).
TRACEBACK_ENV = "PRIVLIN_TRACEBACK"


class UserError(Exception):
    """A mistake the user can fix: printed as one line, exit ``code`` (2, or 1 for "ran and found nothing")."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


class Interval:
    """An argparse ``type`` that parses a number and checks its range (scikit-learn's ``Interval``, as data).

    Parameters
    ----------
    kind : int or float
    left, right : number or None
        Bounds; None is unbounded.
    closed : {"left", "right", "both", "neither"}
        Which bounds are allowed values.
    """

    def __init__(self, kind: type, left: Real | None = None, right: Real | None = None, *, closed: str = "both"):
        if kind not in (int, float) or closed not in ("left", "right", "both", "neither"):
            raise TypeError(f"Interval(int|float, ..., closed=left|right|both|neither), got {kind}, {closed!r}")
        self.kind, self.left, self.right, self.closed = kind, left, right, closed
        self.__name__ = kind.__name__  # argparse names the type in its own messages

    def __call__(self, text: str):
        try:
            value = self.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if self.kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if not self.contains(value):
            raise argparse.ArgumentTypeError(f"must be {self}, got {text}")
        return value

    def contains(self, value) -> bool:
        if isinstance(value, float) and math.isnan(value):
            return False
        lo_ok = self.left is None or (value >= self.left if self.closed in ("left", "both") else value > self.left)
        hi_ok = self.right is None or (value <= self.right if self.closed in ("right", "both") else value < self.right)
        return lo_ok and hi_ok

    def __str__(self) -> str:
        lo_in, hi_in = self.closed in ("left", "both"), self.closed in ("right", "both")
        if self.left is not None and (self.right is None or (self.right == math.inf and not hi_in)):
            return f"{'>=' if lo_in else '>'} {self.left:g}" + ("" if self.right is None else ", finite")
        if self.left is None:
            return "any number" if self.right is None else f"{'<=' if hi_in else '<'} {self.right:g}"
        return f"in {'[' if lo_in else '('}{self.left:g}, {self.right:g}{']' if hi_in else ')'}"

    def __repr__(self) -> str:
        return f"Interval({self.kind.__name__}, {self.left}, {self.right}, closed={self.closed!r})"


def output_folder(text: str) -> str:
    """An argparse ``type`` for an output folder: refused when it is a file or cannot be created or written."""
    path = os.path.abspath(os.path.expanduser(text))
    probe = path
    while not os.path.exists(probe):  # the deepest part that exists decides
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder ({probe!r} is a file)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write in {probe!r}")
    return text


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's limit and default in ``--help``; not for flags or a None default (their help says what happens)."""

    def _format_action(self, action):
        if action.help == argparse.SUPPRESS:
            return super()._format_action(action)
        text = action.help or ""
        if isinstance(action.type, Interval):
            text += f" ({action.type})"
        shown = action.option_strings and action.nargs != 0 and action.default is not None
        if shown and action.default is not argparse.SUPPRESS and "%(default)" not in text:
            text += " (default: %(default)s)"
        shown_action = copy.copy(action)
        shown_action.help = text.strip() or None
        return super()._format_action(shown_action)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser(prog: str, doc: str | None = None, *, epilog: str | None = None) -> argparse.ArgumentParser:
    """An argparse parser following the convention; the description is the first paragraph of ``doc``."""
    return _Parser(prog=prog, description=(doc or "").strip().split("\n\n")[0] or None, epilog=epilog,
                   formatter_class=_HelpFormatter)


def one_line(e: BaseException) -> str:
    """An exception's message on one line (a KeyError's without its quotes)."""
    text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    return " ".join(text.split()) or type(e).__name__


def entry_point(prog: str, errors: Sequence[type[BaseException]] = ()) -> Callable:
    """Decorate ``main(argv=None) -> int``: user mistakes become one line on stderr and an exit code.

    ``errors`` are the exception types that mean a user mistake for this command (a missing file, a refused
    budget, a bad store); :class:`UserError` always does.  A usage error or ``--help`` exits as argparse does
    (``SystemExit`` with code 2 or 0); everything else returns the exit code.
    """
    caught = (UserError, *errors)

    def wrap(main: Callable[..., int | None]) -> Callable[..., int]:
        @functools.wraps(main)
        def run(argv: Sequence[str] | None = None) -> int:
            try:
                code = int(main(argv) or 0)
                sys.stdout.flush()  # a closed pipe fails here, inside the handler, not at the interpreter's exit
                return code
            except KeyboardInterrupt:
                print(f"\n{prog}: interrupted", file=sys.stderr)
                return 130
            except BrokenPipeError:  # the reader of stdout went away (``| head``): stop quietly
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's last flush does not fail again
                os.close(devnull)
                return 141
            except caught as e:
                if os.environ.get(TRACEBACK_ENV) == "1":
                    raise
                print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
                return getattr(e, "code", 2) if isinstance(e, UserError) else 2

        return run

    return wrap


#: Seconds between a log's lines of a step that shows it is alive (``status(log_every=LOG_EVERY)``); on a terminal
#: the line ticks each second.
LOG_EVERY = 3.0


@contextlib.contextmanager
def status(desc: str, *, enabled: bool = True, after: float = 2.0, every: float = 1.0,
           log_every: float | None = None) -> Iterator[None]:
    """Progress of one slow step: once it has run ``after`` seconds, show ``desc`` and the time spent (stderr).

    On a terminal the line ticks every ``every`` seconds (a tqdm bar, so other tqdm bars nest below it); in a log
    it is one line when shown and one with the time at the end, and with ``log_every`` one more line with the time
    every ``log_every`` seconds between (a log that must show the step is alive).  A step done within ``after``
    seconds prints nothing.  ``desc`` must not contain private data.
    """
    if not enabled:
        yield
        return
    t0 = time.perf_counter()
    live = sys.stderr.isatty()
    stop, lock, shown = threading.Event(), threading.Lock(), []

    def watch():
        if stop.wait(after):
            return
        with lock:
            if stop.is_set():
                return
            if live:
                from tqdm.auto import tqdm

                shown.append(tqdm(total=None, desc=f"{desc} ... {time.perf_counter() - t0:.0f} s",
                                  bar_format="{desc}", file=sys.stderr, leave=False))
            else:
                print(f"{desc} ...", file=sys.stderr, flush=True)
                shown.append(None)
        tick = every if live else log_every
        while tick is not None and not stop.wait(tick):
            with lock:
                if stop.is_set():
                    return
                if live:
                    shown[0].set_description_str(f"{desc} ... {time.perf_counter() - t0:.0f} s")
                else:
                    print(f"{desc} ... {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        with lock:
            stop.set()
        watcher.join()
        if shown:
            if shown[0] is not None:
                shown[0].close()
            print(f"{desc}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
