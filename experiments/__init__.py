"""Experiments: the quickstart, ε-sweeps on any store, and reproductions of the seed papers' tables.

Scripts (``python -m experiments.<name> --help``): ``quickstart``, ``eps_sweep``, ``reproduce_mehta``,
``reproduce_randp``.  Nothing in the library imports this package.
"""
