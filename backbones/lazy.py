"""Public names of a package that load on first use (PEP 562), so importing the package stays cheap.

``featurize --help`` must answer without importing torch: ``backbones`` and ``featurize`` export their
torch-bound names through this, and import them only when one is first used.
"""
from __future__ import annotations

import importlib
import sys


def lazy_exports(package: str, names: dict[str, str]):
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps a public name to the submodule defining it."""
    module = sys.modules[package]

    def __getattr__(name: str):
        if name in names:
            value = getattr(importlib.import_module(f".{names[name]}", package), name)
            setattr(module, name, value)  # later lookups skip this function
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(vars(module)) | set(names))

    return __getattr__, __dir__
