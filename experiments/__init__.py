"""Experiments: the quickstart, ε-sweeps on any store, and reproductions of the seed papers' tables.

Scripts (``python -m experiments.<name> --help``): ``quickstart``, ``eps_sweep``, ``reproduce_mehta``,
``reproduce_randp``.  Nothing in the library imports this package.  Each script parses its arguments before it
imports privlin, JAX or torch, so ``--help`` and a usage error answer at once.
"""
from __future__ import annotations

import functools
import sys
from typing import Callable

import stores
import cliconv as cli

__all__ = ["USER_ERRORS", "entry_point"]

#: What an experiment script reports as a one-line user mistake (``cliconv.entry_point``): a missing or wrong
#: store or output path, a bad value.  A refused budget is one too (:func:`entry_point`).
USER_ERRORS = (OSError, ValueError, stores.StoreError)


def entry_point(prog: str) -> Callable:
    """``cliconv.entry_point(prog, USER_ERRORS)``, with a refused budget also printed as one line (exit 2).

    ``privlin.ledger.PrivacyBudgetExceeded`` is matched through ``sys.modules`` when an exception arrives (it can
    only have been raised once that module is loaded), so that importing a script loads neither privlin nor JAX.
    """
    def wrap(main: Callable[..., int | None]) -> Callable[..., int]:
        @functools.wraps(main)
        def checked(argv=None):
            try:
                return main(argv)
            except Exception as e:
                ledger = sys.modules.get("privlin.ledger")
                if ledger is not None and isinstance(e, ledger.PrivacyBudgetExceeded):
                    raise cli.UserError(cli.one_line(e)) from e
                raise

        return cli.entry_point(prog, USER_ERRORS)(checked)

    return wrap
