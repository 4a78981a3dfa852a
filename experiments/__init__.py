"""Experiments: the quickstart, ε-sweeps on any store, and reproductions of the seed papers' tables.

Scripts (``python -m experiments.<name> --help``): ``quickstart``, ``eps_sweep``, ``reproduce_mehta``,
``reproduce_randp``.  Nothing in the library imports this package.
"""
import stores
from privlin.ledger import PrivacyBudgetExceeded

#: What an experiment script reports as a one-line user mistake (``stores.cli.entry_point``): a missing or wrong
#: store or output path, a bad value, a refused budget.
USER_ERRORS = (OSError, ValueError, stores.StoreError, PrivacyBudgetExceeded)
