"""Moved to the top-level module :mod:`cliconv` (shared by every package): ``stores.cli`` *is* that module, for
imports written before the move."""
import sys

import cliconv

sys.modules[__name__] = cliconv
